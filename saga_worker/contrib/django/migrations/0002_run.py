"""The admin's model (``Run``, no table: ``managed = False``) and its permissions, created by
``manage.py migrate`` as for any model. Nothing is written to the database by this migration."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("saga_worker", "0001_journal")]
    operations = [
        migrations.CreateModel(
            name="Run",
            fields=[("run_id", models.CharField(max_length=200, primary_key=True, serialize=False))],
            options={
                "verbose_name": "run",
                "verbose_name_plural": "runs",
                "db_table": "saga_runs",
                "managed": False,
                "default_permissions": ("view",),
                "permissions": [
                    ("compensate_run", "Can compensate or re-drive a run"),
                    ("decide", "Can approve or deny a call or a gated compensation"),
                ],
            },
        )
    ]
