"""The admin's model: no table of its own (``managed = False``; the journal's tables are Alembic's,
read through :mod:`saga_worker.operating.views` as the console reads them). It gives the admin its page under
the app's label and the permissions their content type: ``saga_worker.view_run``,
``saga_worker.compensate_run`` (compensate or re-drive a run) and ``saga_worker.decide`` (approve or
deny a suspended call or a gated compensation)."""

from __future__ import annotations

from django.db import models


class Run(models.Model):  # type: ignore[misc]
    run_id = models.CharField(max_length=200, primary_key=True)

    class Meta:
        managed = False
        db_table = "saga_runs"
        default_permissions = ("view",)
        permissions = [
            ("compensate_run", "Can compensate or re-drive a run"),
            ("decide", "Can approve or deny a call or a gated compensation"),
        ]
        verbose_name = "run"
        verbose_name_plural = "runs"

    def __str__(self) -> str:
        return str(self.run_id)
