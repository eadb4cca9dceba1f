"""The Django app: ``INSTALLED_APPS = [..., "saga_worker.contrib.django"]``."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig


def open_atomic_block() -> str | None:
    """The probe for :mod:`saga_worker.recording.transactions`: a transaction of the app's open on any of
    Django's connections in this thread, which the call's record (on the journal's own connection)
    does not join: an ``atomic()`` block (a TestCase's own per-test block is not the app's, and is
    ignored), or a connection whose autocommit is off (``transaction.set_autocommit(False)``, or
    ``AUTOCOMMIT: False``), where every write waits for a commit the app may never make. A
    ``Tool(in_transaction=True)`` call (``transactions.joining``) leaves out ``SAGA_DATABASE``'s: the
    journal joins that transaction (``hosting.py``)."""
    from django.db import connections

    from ...recording import transactions
    from .hosting import joinable

    joining = transactions.joining_journal()
    for conn in connections.all(initialized_only=True):
        if joining is not None and joinable(conn.alias, joining):
            continue  # an in_transaction call: the journal joins this one (hosting.py)
        if conn.in_atomic_block:
            blocks: list[Any] = list(getattr(conn, "atomic_blocks", []))
            if not blocks or any(not getattr(b, "_from_testcase", False) for b in blocks):
                return f"an open atomic() block of Django database {conn.alias!r} (or ATOMIC_REQUESTS)"
        elif conn.connection is not None and not conn.get_autocommit():
            # Outside atomic() autocommit is off only by the app's hand; a closed connection has none.
            return f"an open transaction of Django database {conn.alias!r} (autocommit is off)"
    return None


class SagaWorkerConfig(AppConfig):  # type: ignore[misc]
    name = "saga_worker.contrib.django"
    label = "saga_worker"
    verbose_name = "saga-worker"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from ...journal import hosts
        from ...recording import transactions
        from ...settings import get_settings
        from .hosting import lend
        from .migrating import upgrade_after_migrate

        transactions.add_probe(open_atomic_block)
        hosts.add_host(lend)
        post_migrate.connect(upgrade_after_migrate, sender=self, dispatch_uid="saga_worker.upgrade_journal")
        get_settings.cache_clear()  # from now on SAGA_* come from Django's settings
