"""Without the OpenTelemetry API (saga-worker installed without the ``otel`` extra) everything works as
before tracing: nothing imports it, a run and its unwind give the same report, the journal stores no
trace context. The dev environment has the API, so the child process blocks its import
(tests/install/test_wheel_install.py checks the wheel installed without extras, where it is absent)."""

from __future__ import annotations

from pathlib import Path

from tests.tracing.children import run_child

CHILD = """
import json, sys
if sys.argv[2] == "absent":
    for name in [n for n in sys.modules if n == "opentelemetry" or n.startswith("opentelemetry.")]:
        del sys.modules[n]
    sys.modules["opentelemetry"] = None  # import opentelemetry... raises ImportError, as when it is absent
from saga_worker import compensate_run, open_journal, saga
from saga_worker.observing import tracing
from tests.tracing.order import INPUTS, order_tools, record_order
journal = open_journal(sys.argv[1])
record_order(journal, "run-1")
with saga("run-2", journal=journal, tools=order_tools()) as run:
    run.call("charge", INPUTS["charge"], id="charge")
report = compensate_run("run-1", journal=journal, tools=order_tools(fail=("charge",)))
print(json.dumps({
    "enabled": tracing.ENABLED,
    "otel_loaded": sorted(n for n in sys.modules if n.startswith("opentelemetry.")),
    "entries": [(e.tool_name, e.status.value) for e in report.entries],
    "run_trace": [journal.get_run(r).traceparent for r in ("run-1", "run-2")],
    "exec_trace": [r.exec_traceparent for r in journal.list_records("run-1")],
}))
"""


def test_without_the_api_runs_and_unwinds_as_before_and_journal_no_trace_context(tmp_path: Path) -> None:
    seen = run_child(CHILD, tmp_path, "absent")
    assert seen["enabled"] is False
    assert seen["otel_loaded"] == []
    assert seen["entries"] == [
        ["notify", "skipped-no-hook"],
        ["reserve", "compensated"],
        ["charge", "failed"],
    ]
    assert seen["run_trace"] == [None, None]
    assert seen["exec_trace"] == [None, None, None]


def test_with_the_api_and_no_sdk_the_no_op_tracer_changes_nothing_either(tmp_path: Path) -> None:
    seen = run_child(CHILD, tmp_path, "api-only")
    assert seen["enabled"] is True
    assert seen["entries"] == [
        ["notify", "skipped-no-hook"],
        ["reserve", "compensated"],
        ["charge", "failed"],
    ]
    assert seen["run_trace"] == [None, None]  # no span worth journaling: nothing recorded, nothing linked
    assert seen["exec_trace"] == [None, None, None]
