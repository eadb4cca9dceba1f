"""``python task_names.py``: the Celery tasks this interpreter's saga-worker registers, each with its
parameters (name, kind, has a default), and the tasks its beat sends with default settings, as JSON.
Imports nothing but ``saga_worker`` and Celery, so the previous release's interpreter runs it too."""

from __future__ import annotations

import inspect
import json
import os
import tempfile

os.environ.setdefault("SAGA_JOURNAL_URL", f"sqlite:///{tempfile.mkdtemp()}/journal.db")

from saga_worker.celery import default_app  # noqa: E402

app = default_app()
app.loader.import_default_modules()
tasks = {
    name: [
        [p.name, p.kind.name, p.default is not inspect.Parameter.empty]
        for p in inspect.signature(task.run).parameters.values()
    ]
    for name, task in sorted(app.tasks.items())
    if not name.startswith("celery.")
}
beat = sorted({entry["task"] for entry in (app.conf.beat_schedule or {}).values()})
print(json.dumps({"tasks": tasks, "beat": beat}))
