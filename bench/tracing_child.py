"""One mode of the tracing group (bench/tracing.py), in a process of its own: OpenTelemetry's global
provider is once per process, and "absent" must never have imported the API.

``python -m bench.tracing_child MODE``; then, per line ``N`` on stdin, records and unwinds N five-step
runs of no-op tools on a fresh memory journal and answers the seconds it took. MODE: ``absent`` (the
API's import blocked, as without the otel extra), ``noop`` (the API, no SDK: its no-op tracer), ``sdk``
(the SDK recording every span into an InMemorySpanExporter, emptied after each round).
"""

from __future__ import annotations

import sys
import time
import types
import uuid

MODE = sys.argv[1]
if MODE == "absent":
    for name in [n for n in sys.modules if n == "opentelemetry" or n.startswith("opentelemetry.")]:
        del sys.modules[name]
    sys.modules["opentelemetry"] = None  # type: ignore[assignment]
exporter = None
if MODE == "sdk":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

from bench.seed import noop_tools, record_run  # noqa: E402 - after the mode is set up
from saga_worker import compensate_run, open_journal  # noqa: E402
from saga_worker.observing import tracing  # noqa: E402

STEPS = 5
assert tracing.ENABLED is (MODE != "absent")


def one_round(runs: int) -> float:
    journal = open_journal("memory://")
    tools = noop_tools()
    started = time.perf_counter()
    for _ in range(runs):
        run_id = f"t-{uuid.uuid4().hex[:16]}"
        record_run(journal, run_id, STEPS, tools)
        report = compensate_run(run_id, journal=journal, tools=tools)
        assert report.complete, report
    elapsed = time.perf_counter() - started
    if exporter is not None:
        assert len(exporter.get_finished_spans()) >= runs * (2 * STEPS + 2)
        exporter.clear()
    return elapsed


def call_sites(loops: int) -> float:
    """Seconds per run of the tracing call sites alone, as a five-step run and its unwind make them
    (a run's events, per call an execute span and its outcome, per step a compensate span and its
    verdict, the unwind's span and report): without the API, a function returning a constant each."""
    from saga_worker.journal.records import RecordStatus, ToolRecord

    record = ToolRecord("r", "call-1", 1, 1, "call-1", "t0", "call", {}, RecordStatus.SUCCEEDED)
    loop = types.SimpleNamespace(run_id="r", trace=tracing.NO_SPAN)
    started = time.perf_counter()
    for _ in range(loops):
        for _event in tracing.traced_run(loop, None, iter(()), "run"):
            pass
        for _step in range(STEPS):
            with tracing.execute(tracing.NO_SPAN, record, "k") as span:
                span.outcome(None)
            with tracing.compensate("r", record, "k", dry_run=False) as span:
                span.verdict(None)
        with tracing.unwind("r", actor="a", via="library", dry_run=False) as span:
            span.report(None)
    return (time.perf_counter() - started) / loops


one_round(20)  # warm up
print("ready", flush=True)
for line in sys.stdin:
    if line.startswith("sites"):
        print(f"{call_sites(int(line.split()[1])):.9f}", flush=True)
        continue
    print(f"{one_round(int(line)):.6f}", flush=True)
