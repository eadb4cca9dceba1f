"""Tracing set up after saga-worker has already run untraced in the process is used from then on: a
provider set by code at any time, or one the environment names (``OTEL_PYTHON_TRACER_PROVIDER``). The
span sites read the environment once per process (it is looked up on every call of the API's
``get_tracer_provider()`` until a provider is set), so each case runs in a child process of its own."""

from __future__ import annotations

from pathlib import Path

from tests.tracing.children import run_child

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


def test_a_provider_set_by_code_after_untraced_runs_traces_the_runs_after_it(tmp_path: Path) -> None:
    seen = run_child(CHILD, tmp_path, "code", {})
    assert seen["before"] is None
    assert seen["after"] is not None and seen["after"].startswith("00-")


def test_a_provider_the_environment_names_traces_every_run(tmp_path: Path) -> None:
    seen = run_child(CHILD, tmp_path, "env", {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"})
    assert seen["before"] is not None and seen["after"] is not None


def test_without_a_provider_no_run_is_traced(tmp_path: Path) -> None:
    seen = run_child(CHILD, tmp_path, "none", {})
    assert seen == {"before": None, "after": None}
