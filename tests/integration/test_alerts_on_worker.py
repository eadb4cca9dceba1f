"""Issue 48, item 2, on a real worker (Redis, PostgreSQL): a refund hook that fails writes an ERROR
line naming the run, step, tool and key to the worker's log, sends ``unwind_halted`` in the worker,
and reaches Sentry through its SDK's Celery and logging integrations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from saga_worker.core.keys import compensate_key

from . import scenarios
from .conftest import Workers, redis_setup, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]


def test_a_failed_refund_on_a_worker_is_an_error_line_a_signal_and_a_sentry_event(
    tmp_path: Path, workers: Workers, pg_url: str, run_id: str
) -> None:
    pytest.importorskip("sentry_sdk")
    setup = redis_setup(tmp_path, pg_url)
    setup.saga["tools"] = "tests.integration.alert_tools:tools"
    worker = workers.start(setup, concurrency=1)
    client, journal, ledger = setup.client(), setup.journal(), setup.ledger()
    try:
        scenarios.place_order(journal, ledger, run_id)
        setup.control_file(run_id, "fail", "reserve")
        report = scenarios.unwind(client, run_id)
    finally:
        ledger.close()
        journal.close()
        client.close()
    assert scenarios.statuses(report) == ["compensated", "failed", "not-attempted"]
    key = compensate_key(run_id, "call-2")
    signal = setup.control / f"{run_id}.signal-failed"
    wait_for(signal.exists, 30, "the worker's unwind_halted receiver")
    sent = json.loads(signal.read_text())
    assert (sent["step"], sent["tool"], sent["key"]) == ("call-2", "reserve", key)
    assert "the provider refused the compensation" in sent["error"]

    def sentry_events() -> list[dict[str, object]]:
        return [json.loads(p.read_text()) for p in setup.control.glob("sentry-*.json")]

    wait_for(
        lambda: any(e.get("logger") == "saga_worker.compensation.alerts" for e in sentry_events()),
        30,
        "Sentry's event",
    )
    [event] = [e for e in sentry_events() if e.get("logger") == "saga_worker.compensation.alerts"]
    assert event["level"] == "error" and key in json.dumps(event)
    worker.stop()
    lines = [line for line in worker.log.read_text().splitlines() if f"unwind of run {run_id} halted" in line]
    assert len(lines) == 1 and "ERROR" in lines[0] and key in lines[0] and "'reserve'" in lines[0]
