"""Telemetry that breaks never breaks the work it watches (issue 42): a span processor that raises when
a span starts or ends, an exporter that raises, a metric that cannot be recorded, a log line that
cannot be formatted. Runs, ``saga()`` blocks and unwinds go on without it, on every journal, and every
effect is done and undone exactly once, as a ledger counts them."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest
from prometheus_client.values import MutexValue

from saga_worker import (
    CallOptions,
    CompensationStatus,
    Journal,
    Tool,
    compensate_run,
    run_durable,
    saga,
    scripted,
)
from saga_worker.observing import guard
from saga_worker.observing.logjson import JsonFormatter
from tests.ledger import MemoryLedger, order_script, order_tools

from .spans import BrokenTracing

BREAKAGES = ["span-start", "span-end", "span-export", "metric"]


class Breakage:
    """What breaks, from ``on()`` until the test ends."""

    def __init__(self, kind: str, tracing: BrokenTracing, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kind, self._tracing, self._monkeypatch = kind, tracing, monkeypatch

    def on(self) -> None:
        if self.kind == "metric":  # every counter and histogram stores its value through this

            def unwritable(value: MutexValue, amount: float) -> None:
                raise OSError("the metrics file cannot be written")

            self._monkeypatch.setattr(MutexValue, "inc", unwritable)
        else:
            self._tracing.fails = self.kind.removeprefix("span-")


@pytest.fixture(params=BREAKAGES)
def breakage(
    request: pytest.FixtureRequest, broken_tracing: BrokenTracing, monkeypatch: pytest.MonkeyPatch
) -> Breakage:
    monkeypatch.setattr(guard, "reported", set())  # what this test breaks is logged afresh
    return Breakage(request.param, broken_tracing, monkeypatch)


def keys(run_id: str, what: str) -> dict[str, int]:
    middle = ":comp:" if what == "compensate" else ":"
    return {f"{run_id}{middle}call-{n}": 1 for n in (1, 2, 3)}


def test_an_unwind_under_broken_telemetry_undoes_every_effect_once_and_a_redrive_finds_them_undone(
    journal: Journal, breakage: Breakage, run_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = MemoryLedger()
    tools = order_tools(ledger)
    assert run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order_script())).status == (
        "finished"
    )
    breakage.on()

    report = compensate_run(run_id, journal=journal, tools=tools)
    again = compensate_run(run_id, journal=journal, tools=tools)

    assert report.complete and report.condemned
    assert [e.status for e in report.entries] == [CompensationStatus.COMPENSATED] * 3
    assert again.complete
    assert [e.status for e in again.entries] == [CompensationStatus.ALREADY_COMPENSATED] * 3
    assert dict(ledger.call_counts("compensate")) == keys(run_id, "compensate")
    told = [r.getMessage() for r in caplog.records if r.name == "saga_worker.observing"]
    assert len(told) == len(set(told))  # each kind of failure once, however often it failed
    if breakage.kind != "span-export":  # the SDK's own processor catches and logs what exporters raise
        assert told and all(
            line.endswith("failed; saga-worker goes on without it (logged once)") for line in told
        )


def test_a_run_and_a_saga_block_under_broken_telemetry_do_each_effect_once_and_unwind_once(
    journal: Journal, breakage: Breakage, run_id: str
) -> None:
    ledger = MemoryLedger()
    tools = order_tools(ledger)
    breakage.on()

    result = run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order_script()))
    block_id = f"{run_id}-block"
    with saga(block_id, journal=journal, tools=tools) as run:
        for n, call in enumerate(order_script(), start=1):
            run.call(call.tool, call.input, id=f"call-{n}")
    unwound = [compensate_run(r, journal=journal, tools=tools) for r in (run_id, block_id)]

    assert result.status == "finished"
    assert dict(ledger.call_counts("execute")) == {**keys(run_id, "execute"), **keys(block_id, "execute")}
    assert all(u.complete for u in unwound)
    assert dict(ledger.call_counts("compensate")) == {
        **keys(run_id, "compensate"),
        **keys(block_id, "compensate"),
    }


class StrictHandler(logging.StreamHandler[io.StringIO]):
    """A handler that lets a formatting error out, as pytest's own capture does (the standard ones
    print it to stderr and lose the line)."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        raise


def test_a_log_line_json_cannot_format_is_still_written_and_the_unwind_goes_on(
    journal: Journal, spans: Any, run_id: str
) -> None:
    ledger = MemoryLedger()
    log = logging.getLogger("shop.refunds.strict")

    def compensate(input: Any, output: Any, opts: CallOptions) -> None:
        log.warning("refunding %s", opts.idempotency_key, "a stray argument")  # cannot be formatted
        ledger.effect(opts.idempotency_key, "compensate")

    tools = {name: Tool(lambda i, o: {"ok": True}, compensate) for name in ("charge", "reserve", "notify")}
    assert run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order_script())).status == (
        "finished"
    )
    out = io.StringIO()
    handler = StrictHandler(out)
    handler.setFormatter(JsonFormatter())
    log.addHandler(handler)
    log.propagate = False  # only the JSON handler sees these lines (pytest's own capture raises too)
    try:
        report = compensate_run(run_id, journal=journal, tools=tools)
    finally:
        log.removeHandler(handler)
        log.propagate = True

    assert report.complete
    assert dict(ledger.call_counts("compensate")) == keys(run_id, "compensate")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 3
    for line in lines:
        assert line["message"].startswith("refunding %s") and line["level"] == "WARNING"
        assert "not all arguments converted" in line["format_error"]
        assert "trace_id" in line
