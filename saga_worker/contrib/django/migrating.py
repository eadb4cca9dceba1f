"""``manage.py migrate`` brings the journal's tables to the newest schema this package ships (its
Alembic head), whenever it runs: the journal's migrations are Alembic's, not Django's, so a
package upgrade that adds one (an Alembic revision) adds no Django migration to apply. Django's
``post_migrate`` signal, sent at the end of every ``migrate``, runs the upgrade; it does nothing when
the journal is at its head already, or lives elsewhere (``SAGA_JOURNAL_URL``: ``saga-worker db
upgrade`` migrates it)."""

from __future__ import annotations

from typing import Any


def upgrade_journal_on(alias: str) -> bool:
    """Upgrade the journal to its head when it is Django's database ``alias``; False when it is not."""
    from ...journal import open_journal
    from ...settings import get_settings
    from . import database_url

    settings = get_settings()
    if settings.journal_url is not None or alias != getattr(settings, "database", "default"):
        return False
    open_journal(database_url(alias), migrate=True).close()
    return True


def upgrade_after_migrate(sender: Any, *, using: str = "default", **kwargs: Any) -> None:
    """``post_migrate``'s receiver (sent once per app and ``migrate``; connected for this app only)."""
    upgrade_journal_on(using)


__all__ = ["upgrade_after_migrate", "upgrade_journal_on"]
