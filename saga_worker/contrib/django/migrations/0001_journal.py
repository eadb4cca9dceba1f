"""``manage.py migrate`` creates and upgrades the journal's tables (its Alembic migrations, on the
database the migration runs against) when the journal is Django's database."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def upgrade_journal(apps: Any, schema_editor: Any) -> None:
    from saga_worker.contrib.django import database_url
    from saga_worker.journal import open_journal
    from saga_worker.settings import get_settings

    settings = get_settings()
    if settings.journal_url is not None:
        return  # a journal elsewhere: `saga-worker db upgrade` migrates it
    alias = schema_editor.connection.alias
    if alias != getattr(settings, "database", "default"):
        return
    open_journal(database_url(alias), migrate=True).close()


class Migration(migrations.Migration):  # type: ignore[misc]
    atomic = False  # Alembic migrates on its own connection, in its own transaction
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [migrations.RunPython(upgrade_journal, migrations.RunPython.noop, elidable=False)]
