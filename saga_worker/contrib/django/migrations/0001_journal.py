"""``manage.py migrate`` creates and upgrades the journal's tables (its Alembic migrations, on the
database the migration runs against) when the journal is Django's database; later revisions are
applied by every ``migrate`` after this one (``saga_worker.contrib.django.migrating``)."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def upgrade_journal(apps: Any, schema_editor: Any) -> None:
    # A journal elsewhere (SAGA_JOURNAL_URL) is not Django's: `saga-worker db upgrade` migrates it.
    # Every later `migrate` upgrades the journal again (its post_migrate receiver: migrating.py).
    from saga_worker.contrib.django.migrating import upgrade_journal_on

    upgrade_journal_on(schema_editor.connection.alias)


class Migration(migrations.Migration):  # type: ignore[misc]
    atomic = False  # Alembic migrates on its own connection, in its own transaction
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [migrations.RunPython(upgrade_journal, migrations.RunPython.noop, elidable=False)]
