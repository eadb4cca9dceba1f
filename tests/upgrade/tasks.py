"""The Celery tasks a release registers (tests/upgrade/task_names.py run by its interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from .previous import Release

HERE = Path(__file__).resolve().parent
TASK_NAMES = HERE / "task_names.py"


def tasks_of(release: Release | None) -> dict[str, Any]:
    if release is None:
        proc = subprocess.run(
            [sys.executable, str(TASK_NAMES)], capture_output=True, text=True, timeout=120, cwd=HERE
        )
    else:
        proc = release.run(str(TASK_NAMES))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout))
