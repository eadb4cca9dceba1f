"""saga-worker in a Django project (extra ``saga-worker[django]``).

Add ``"saga_worker.contrib.django"`` to ``INSTALLED_APPS``. Then:

- every ``SAGA_*`` setting is read from Django's settings first (``SAGA_TOOLS = "shop.tools:TOOLS"``
  in ``settings.py``), the environment filling what they leave out: one place for the worker, the
  CLI, the console and the library;
- the journal defaults to Django's own database (``SAGA_DATABASE``, default ``"default"``: the same
  server, its own ``saga_*`` tables), and follows it to the test database under ``manage.py test``;
  ``manage.py migrate`` creates and upgrades those tables;
- the broker and result backend default to Celery's Django settings (``CELERY_BROKER_URL``,
  ``CELERY_RESULT_BACKEND``), so the CLI sends where the workers listen;
- a side-effecting call made inside an open ``atomic()`` block (``ATOMIC_REQUESTS`` included), or
  on a connection whose autocommit is off, is refused with
  :class:`~saga_worker.OpenTransactionError`: send the step with ``transaction.on_commit``;
- views get a ready journal: :func:`journal`.

``saga-worker`` commands set Django up when ``DJANGO_SETTINGS_MODULE`` is set (or
``--django-settings``).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ...errors import InvalidInputError, JournalError
from ...journal import Journal, open_journal
from ...settings import SagaSettings, add_settings_source

APP = "saga_worker.contrib.django"
_journals: dict[str, Journal] = {}
_lock = threading.Lock()


def _django() -> Any:
    try:
        import django
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise InvalidInputError(
            "saga_worker.contrib.django needs Django: pip install 'saga-worker[django]'"
        ) from exc
    return django


def enabled() -> bool:
    """Is this process a Django project with saga-worker's app installed? (Reads settings only:
    true before ``django.setup()`` too, as a Celery app module imported by the worker needs.)"""
    try:
        from django.conf import settings
    except ImportError:  # no Django here: a DJANGO_SETTINGS_MODULE left in the environment is not ours
        return False
    if not os.environ.get("DJANGO_SETTINGS_MODULE") and not settings.configured:
        return False
    try:
        apps = list(settings.INSTALLED_APPS)
    except Exception:  # noqa: BLE001 - a settings module that does not import is Django's to report
        return False
    return any(a == APP or a.startswith(APP + ".") for a in apps)


def database_url(alias: str = "default") -> str:
    """The SQLAlchemy URL of Django's database ``alias`` as it is now (the test database while
    Django's test runner has it in place). PostgreSQL (psycopg 3) and SQLite."""
    _django()
    from django.db import connections

    conf = connections[alias].settings_dict
    engine = str(conf.get("ENGINE", ""))
    name = str(conf.get("NAME") or "")
    if engine.endswith("sqlite3"):
        if not name or name == ":memory:" or name.startswith("file:"):
            raise JournalError(
                f"Django database {alias!r} is an in-memory SQLite database, which no other connection "
                "can see: set SAGA_JOURNAL_URL (memory:// for tests) or give the database a file",
            )
        return f"sqlite:///{os.path.abspath(name)}"
    if engine.endswith(("postgresql", "postgis")):
        import sqlalchemy as sa

        url = sa.engine.URL.create(
            "postgresql+psycopg",
            username=conf.get("USER") or None,
            password=conf.get("PASSWORD") or None,
            host=conf.get("HOST") or None,
            port=int(conf["PORT"]) if conf.get("PORT") else None,
            database=name or None,
        )
        return url.render_as_string(hide_password=False)
    raise JournalError(
        f"Django database {alias!r} uses {engine!r}; the journal supports PostgreSQL and SQLite: "
        "set SAGA_JOURNAL_URL"
    )


class DjangoSagaSettings(SagaSettings):
    """:class:`SagaSettings` whose journal, unless one is set, is Django's database ``database``
    resolved when it is opened (so it follows Django to its test database)."""

    database: str = "default"

    def resolved_journal_url(self) -> str:
        return self.journal_url or database_url(self.database)


def saga_settings() -> DjangoSagaSettings:
    """``SAGA_*`` from Django's settings, else the environment, else the defaults; the broker and
    result backend default to ``CELERY_BROKER_URL`` / ``CELERY_RESULT_BACKEND``."""
    _django()
    from django.conf import settings

    given: dict[str, Any] = {}
    for name in DjangoSagaSettings.model_fields:
        key = f"SAGA_{name.upper()}"
        if hasattr(settings, key):
            given[name] = getattr(settings, key)
    s = DjangoSagaSettings(**given)
    fallback = {
        "broker_url": getattr(settings, "CELERY_BROKER_URL", None),
        "result_backend": getattr(settings, "CELERY_RESULT_BACKEND", None),
    }
    update = {k: v for k, v in fallback.items() if getattr(s, k) is None and v}
    return s.model_copy(update=update) if update else s


def _settings_if_enabled() -> SagaSettings | None:
    return saga_settings() if enabled() else None


add_settings_source(_settings_if_enabled)


def journal() -> Journal:
    """The journal for views and management commands: opened once per URL and process (a new one
    when Django's database changes, as under the test runner), migrated on first open."""
    from ...settings import get_settings

    url = get_settings().resolved_journal_url()
    with _lock:
        found = _journals.get(url)
        if found is None:
            found = _journals[url] = open_journal(url, migrate=True)
        return found


def tools() -> dict[str, Any]:
    """The tools (``SAGA_TOOLS`` in Django's settings, or ``install(app, tools=...)``), loaded on
    first use; :class:`~saga_worker.ToolsNotConfiguredError` without them."""
    from ... import executor

    return executor.current().require_tools("saga_worker.contrib.django.tools()")


def close_journals() -> None:
    """Close every journal this module and the worker context opened (their pooled connections),
    so nothing holds the test database when Django destroys it."""
    from ... import executor

    with _lock:
        opened = list(_journals.values())
        _journals.clear()
    for j in opened:
        j.close()
    executor.reset()


def setup(settings_module: str | None = None) -> None:
    """``django.setup()`` for a process that is not ``manage.py`` (the CLI, a script), with
    ``settings_module`` or ``DJANGO_SETTINGS_MODULE``."""
    django = _django()
    if settings_module:
        os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise InvalidInputError("Django settings: set DJANGO_SETTINGS_MODULE or pass --django-settings")
    from django.apps import apps

    if not apps.ready:  # under manage.py (`manage.py saga`, call_command) Django is set up already
        django.setup()
    from ...settings import get_settings

    get_settings.cache_clear()


__all__ = [
    "DjangoSagaSettings",
    "close_journals",
    "database_url",
    "enabled",
    "journal",
    "saga_settings",
    "setup",
    "tools",
]
