"""A fresh interpreter running a test's script on a SQLite journal in ``tmp_path``: what tracing does
at import and at first use can only be seen in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_child(script: str, tmp_path: Path, mode: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``script`` with the journal's URL and ``mode`` as arguments; the JSON of its last line."""
    done = subprocess.run(
        [sys.executable, "-c", script, f"sqlite:///{tmp_path / 'journal.db'}", mode],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen
