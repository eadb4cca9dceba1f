"""Tracing set up after saga-worker has already run untraced in the process is used from then on: a
provider set by code at any time, or one the environment names (``OTEL_PYTHON_TRACER_PROVIDER``). The
span sites read the environment once per process (it is looked up on every call of the API's
``get_tracer_provider()`` until a provider is set), so each case runs in a child process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
from saga_worker import compensate_run, open_journal
from tests.tracing.order import order_tools, record_order
journal = open_journal(sys.argv[1])
record_order(journal, "before")
compensate_run("before", journal=journal, tools=order_tools())
if sys.argv[2] == "code":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
record_order(journal, "after")
compensate_run("after", journal=journal, tools=order_tools())
print(json.dumps({r: journal.get_run(r).traceparent for r in ("before", "after")}))
"""


def _child(tmp_path: Path, mode: str, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, f"sqlite:///{tmp_path / 'journal.db'}", mode],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def test_a_provider_set_by_code_after_untraced_runs_traces_the_runs_after_it(tmp_path: Path) -> None:
    seen = _child(tmp_path, "code", {})
    assert seen["before"] is None
    assert seen["after"] is not None and seen["after"].startswith("00-")


def test_a_provider_the_environment_names_traces_every_run(tmp_path: Path) -> None:
    seen = _child(tmp_path, "env", {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"})
    assert seen["before"] is not None and seen["after"] is not None


def test_without_a_provider_no_run_is_traced(tmp_path: Path) -> None:
    seen = _child(tmp_path, "none", {})
    assert seen == {"before": None, "after": None}
