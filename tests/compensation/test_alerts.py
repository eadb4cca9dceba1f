"""The operator is told (issue 48, item 2): a failed hook, an unwind flagged for a person and a step
awaiting approval are logged on ``saga_worker.compensation.alerts`` at the level each deserves, sent as the
documented signals, counted, and reach Sentry through its logging integration; a receiver that
raises never breaks the unwind. On every journal where it is about what the journal holds."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    Journal,
    MemoryJournal,
    Tool,
    ToolCall,
    compensate_run,
    run_durable,
    scripted,
    unwind_halted,
    unwind_needs_attention,
)
from saga_worker import executor as ex
from saga_worker.core.keys import compensate_key
from saga_worker.observing import metrics
from saga_worker.settings import SagaSettings


def refund_refused(input: Any, output: Any, opts: CallOptions) -> None:
    raise RuntimeError("the provider refused the refund")


def placed(journal: Journal, run_id: str, **refund: Any) -> dict[str, Tool]:
    tools = {
        "charge": Tool(lambda input, opts: {"charge_id": "ch_1"}, refund_refused, **refund),
        "email": Tool(lambda input, opts: "sent"),
    }
    calls = scripted(ToolCall("charge", {"amount": 10}), ToolCall("email", {"to": "ann"}))
    run_durable(run_id, journal=journal, tools=tools, planner=calls)
    return tools


@pytest.fixture
def received() -> Iterator[list[dict[str, Any]]]:
    """What the two signals carried while the test ran."""
    got: list[dict[str, Any]] = []

    def receiver(sender: Any, signal: Any = None, **fields: Any) -> None:
        got.append({"signal": signal.name, **fields})

    unwind_halted.connect(receiver, weak=False)
    unwind_needs_attention.connect(receiver, weak=False)
    yield got
    unwind_halted.disconnect(receiver)
    unwind_needs_attention.disconnect(receiver)


def alerts(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "saga_worker.compensation.alerts"]


def count(metric: Any, **labels: str) -> float:
    value = metrics.registry().get_sample_value(metric, labels)
    return 0.0 if value is None else value


def test_a_failed_refund_is_logged_at_error_with_run_step_tool_key_and_error_and_sent_as_unwind_halted(
    journal: Journal, run_id: str, caplog: pytest.LogCaptureFixture, received: list[dict[str, Any]]
) -> None:
    tools = placed(journal, run_id)
    halted_before = count("saga_unwinds_halted_total", tool="charge", status="failed")
    failed_before = count("saga_compensate_hooks_failed_total", tool="charge")
    with caplog.at_level(logging.INFO, logger="saga_worker"):
        report = compensate_run(run_id, journal=journal, tools=tools)
    assert [e.status.value for e in report.entries] == ["skipped-no-hook", "failed"]
    key = compensate_key(run_id, "call-1")
    [record] = alerts(caplog)
    assert record.levelno == logging.ERROR
    message = record.getMessage()
    for part in (run_id, "call-1", "'charge'", key, "the provider refused the refund"):
        assert part in message
    assert (record.saga_run_id, record.saga_step, record.saga_tool, record.saga_key) == (  # type: ignore[attr-defined]
        run_id, "call-1", "charge", key,
    )  # fmt: skip
    assert received == [
        {
            "signal": "unwind_halted",
            "run_id": run_id,
            "step": "call-1",
            "tool": "charge",
            "key": key,
            "status": "failed",
            "error": report.entries[1].error,
            "attempts": 1,
            "worker_lost": False,
        }
    ]
    assert count("saga_unwinds_halted_total", tool="charge", status="failed") == halted_before + 1
    assert count("saga_compensate_hooks_failed_total", tool="charge") == failed_before + 1


def test_a_step_awaiting_approval_is_logged_at_info_not_as_an_error(
    run_id: str, caplog: pytest.LogCaptureFixture, received: list[dict[str, Any]]
) -> None:
    journal = MemoryJournal()
    tools = placed(journal, run_id, compensate_needs_approval=True)
    with caplog.at_level(logging.INFO, logger="saga_worker"):
        report = compensate_run(run_id, journal=journal, tools=tools)
    assert report.halt is not None and report.halt.value == "awaiting-approval"
    assert [(r.levelno, r.saga_status) for r in alerts(caplog)] == [(logging.INFO, "awaiting-approval")]  # type: ignore[attr-defined]
    assert [(r["signal"], r["status"]) for r in received] == [("unwind_halted", "awaiting-approval")]


def test_a_receiver_that_raises_never_breaks_the_unwind_it_is_told_about(
    run_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    journal = MemoryJournal()
    tools = placed(journal, run_id)

    def broken(sender: Any, **fields: Any) -> None:
        raise ValueError("a receiver's own bug")

    unwind_halted.connect(broken, weak=False)
    try:
        report = compensate_run(run_id, journal=journal, tools=tools)
    finally:
        unwind_halted.disconnect(broken)
    assert [e.status.value for e in report.entries] == ["skipped-no-hook", "failed"]
    run = journal.get_run(run_id)
    assert run is not None and run.unwind_state.value == "incomplete"  # the sweeper comes back to it


def test_the_sweeper_giving_up_is_logged_at_error_and_sent_as_unwind_needs_attention(
    journal: Journal, run_id: str, caplog: pytest.LogCaptureFixture, received: list[dict[str, Any]]
) -> None:
    tools = placed(journal, run_id)
    compensate_run(run_id, journal=journal, tools=tools)
    settings = SagaSettings(sweep_max_attempts=1)
    now = journal.now()
    ex.sweep(journal, enqueue=lambda run: None, settings=settings, now=now + 1000.0)
    received.clear()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="saga_worker"):
        outcome = ex.sweep(journal, enqueue=lambda run: None, settings=settings, now=now + 1e6)
    assert outcome.flagged == [run_id]
    [record] = alerts(caplog)
    assert record.levelno == logging.ERROR
    assert run_id in record.getMessage() and "gave up after 1 re-drives" in record.getMessage()
    assert [(r["signal"], r["run_id"]) for r in received] == [("unwind_needs_attention", run_id)]
    assert "gave up" in received[0]["note"]


def test_sentry_with_its_logging_integration_receives_an_event_for_a_failed_refund(run_id: str) -> None:
    """In process, Sentry's logging integration alone: its Celery integration patches Celery's tracer
    for the rest of the process (tests/integration/test_alerts_on_worker.py runs both on a worker)."""
    sentry_sdk = pytest.importorskip("sentry_sdk")
    from sentry_sdk.envelope import Envelope
    from sentry_sdk.integrations.logging import LoggingIntegration
    from sentry_sdk.transport import Transport

    events: list[dict[str, Any]] = []

    class Captured(Transport):
        def capture_envelope(self, envelope: Envelope) -> None:
            events.extend(item.payload.json or {} for item in envelope.items if item.type == "event")

    journal = MemoryJournal()
    tools = placed(journal, run_id)
    sentry_sdk.init(
        dsn="https://public@sentry.invalid/1",
        transport=Captured,
        integrations=[LoggingIntegration(level=logging.INFO, event_level=logging.ERROR)],
        default_integrations=False,
        auto_enabling_integrations=False,  # Celery's would patch Celery's tracer for the whole session
    )
    try:
        compensate_run(run_id, journal=journal, tools=tools)
        sentry_sdk.flush()
    finally:
        sentry_sdk.get_client().close()
        # No DSN, no integrations: nothing sent, nothing patched for later tests.
        sentry_sdk.init(default_integrations=False, auto_enabling_integrations=False)
    [event] = [e for e in events if e.get("logger") == "saga_worker.compensation.alerts"]
    assert event["level"] == "error"
    assert run_id in event["logentry"]["formatted"] or run_id in event["logentry"].get("message", "")


def test_a_busy_step_is_logged_at_warning_not_as_an_error(
    run_id: str, caplog: pytest.LogCaptureFixture, received: list[dict[str, Any]]
) -> None:
    journal = MemoryJournal()
    tools = placed(journal, run_id)
    key = compensate_key(run_id, "call-1")
    # Another unwinder holds the refund right now, under a live lease.
    journal.claim_compensation(
        run_id, "call-1", via_run_id=run_id, owner="other", ttl=60.0, idempotency_key=key
    )
    with caplog.at_level(logging.INFO, logger="saga_worker"):
        report = compensate_run(run_id, journal=journal, tools=tools)
    assert report.halt is not None and report.halt.value == "busy"
    assert [(r.levelno, r.saga_status) for r in alerts(caplog)] == [(logging.WARNING, "busy")]  # type: ignore[attr-defined]
    assert [(r["signal"], r["status"], r["key"]) for r in received] == [("unwind_halted", "busy", key)]
