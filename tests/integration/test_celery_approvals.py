"""Approvals, gated compensation and the audit trail over real Celery workers (Redis broker, results
and locks; PostgreSQL journal), with the beat sweeper running in the worker (docs/reference/approvals.md, docs/reference/celery.md)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from saga_worker import (
    Journal,
    ToolCall,
    approve,
    approve_compensation,
    read_audit,
    resume_run,
    run_durable,
    scripted,
)
from saga_worker.core.keys import compensate_key
from saga_worker.journal.records import UnwindState
from tests.ledger import Ledger, order_tools

from .conftest import Setup, Workers, redis_setup, wait_for
from .scenarios import unwind
from .worker_tools import approval_tools

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, pg_database_url: str, module_workers: Workers) -> Setup:
    setup = redis_setup(tmp_path_factory.mktemp("approvals"), pg_database_url)
    module_workers.start(setup, concurrency=2, beat=True)
    return setup


@pytest.fixture
def parts(running: Setup) -> Iterator[tuple[Celery, Journal, Ledger]]:
    client, journal, ledger = running.client(), running.journal(), running.ledger()
    yield client, journal, ledger
    ledger.close()
    journal.close()
    client.close()


def tools(ledger: Ledger) -> dict[str, Any]:
    return {**order_tools(ledger), **approval_tools(ledger)}


def trail(journal: Journal, run_id: str) -> list[tuple[str, str, str, str]]:
    return [(r.action.value, r.actor, r.via.value, r.reason) for r in read_audit(journal, run_id)]


def placed_with_gate(journal: Journal, ledger: Ledger, run_id: str) -> None:
    script = scripted(ToolCall("charge", {"amount": 900}), ToolCall("restock", {"sku": "A1"}))
    assert run_durable(run_id, journal=journal, tools=tools(ledger), planner=script).status == "finished"


def test_an_approved_call_executes_once_and_a_worker_compensates_it_with_actor_and_reason_audited(
    parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    script = scripted(ToolCall("charge", {"amount": 10}), ToolCall("refund", {"amount": 500}))
    assert run_durable(run_id, journal=journal, tools=tools(ledger), planner=script).status == "suspended"
    assert ledger.effect_counts("execute:refund")[f"{run_id}:call-2"] == 0
    approve(journal, run_id, "call-2", actor="alice", reason="customer called")
    assert resume_run(run_id, journal=journal, tools=tools(ledger), planner=script).status == "finished"
    assert resume_run(run_id, journal=journal, tools=tools(ledger), planner=script).status == "finished"
    assert ledger.effect_counts("execute:refund")[f"{run_id}:call-2"] == 1

    report = client.signature("saga.compensate_run").delay(run_id, actor="bob", reason="chargeback")
    data = dict(report.get(timeout=60, interval=0.05))
    assert [(e["suffix"], e["status"]) for e in data["entries"]] == [
        ("call-2", "compensated"),
        ("call-1", "compensated"),
    ]
    assert data["condemned_by"] == "bob" and data["reason"] == "chargeback"
    assert ledger.effect_counts("compensate:refund")[compensate_key(run_id, "call-2")] == 1
    assert trail(journal, run_id) == [
        ("approved", "alice", "library", "customer called"),
        ("condemned", "bob", "worker", "chargeback"),
        ("unwound", "bob", "worker", "chargeback"),
    ]


def test_a_dry_run_over_a_worker_shows_the_gate_and_writes_no_audit_row(
    parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    placed_with_gate(journal, ledger, run_id)
    plan = unwind(client, run_id, dry_run=True)
    assert [(e["suffix"], e["status"], e["needs_approval"]) for e in plan["entries"]] == [
        ("call-2", "would-compensate", True),
        ("call-1", "would-compensate", False),
    ]
    assert read_audit(journal, run_id) == []
    run = journal.get_run(run_id)
    assert run is not None and not run.condemned


def test_awaiting_approval_halts_then_the_sweeper_resumes_the_approved_gate_with_the_same_key(
    parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    placed_with_gate(journal, ledger, run_id)
    first = unwind(client, run_id)
    assert [(e["suffix"], e["status"]) for e in first["entries"]] == [
        ("call-2", "awaiting-approval"),
        ("call-1", "not-attempted"),
    ]
    key = compensate_key(run_id, "call-2")
    assert first["entries"][0]["idempotency_key"] == key
    assert ledger.effect_counts("compensate:restock")[key] == 0
    run = journal.get_run(run_id)
    assert run is not None and run.unwind_state is UnwindState.AWAITING

    approve_compensation(journal, run_id, "call-2", actor="carol", reason="stock counted")

    def complete() -> bool:
        now = journal.get_run(run_id)
        return now is not None and now.unwind_state is UnwindState.COMPLETE

    wait_for(complete, 60, "the beat sweeper to resume the approved unwind")  # nobody else asks
    assert ledger.effect_counts("compensate:restock")[key] == 1
    assert {c.key for c in ledger.calls("compensate:restock") if c.key.startswith(run_id)} == {key}
    actions = [(a, who, via) for a, who, via, _ in trail(journal, run_id)]
    assert actions[:3] == [
        ("condemned", actions[0][1], "worker"),
        ("unwound", actions[0][1], "worker"),
        ("compensation-approved", "carol", "library"),
    ]
    assert actions[-1][0] == "unwound" and actions[-1][2] == "sweeper"
    assert read_audit(journal, run_id)[-1].detail["complete"] is True


def test_two_approvers_of_one_gate_at_once_give_one_decision_and_one_effect(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    placed_with_gate(journal, ledger, run_id)
    assert unwind(client, run_id)["entries"][0]["status"] == "awaiting-approval"
    journals = [running.journal(), running.journal()]
    start = threading.Barrier(2)
    outcomes: list[Any] = []

    def decide(j: Journal, who: str) -> None:
        start.wait()
        outcomes.append(approve_compensation(j, run_id, "call-2", actor=who, reason="ok"))

    threads = [
        threading.Thread(target=decide, args=(j, w)) for j, w in zip(journals, ("erin", "frank"), strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for j in journals:
        j.close()
    assert len(outcomes) == 2 and outcomes[0] == outcomes[1]  # both get the one decision written
    # Two unwinds asked at once as well, with the sweeper also about: one effect.
    pending = [client.signature("saga.compensate_run").delay(run_id) for _ in range(2)]
    for result in pending:
        result.get(timeout=60, interval=0.05)
    wait_for(
        lambda: getattr(journal.get_run(run_id), "unwind_state", None) is UnwindState.COMPLETE,
        60,
        "the unwind to complete",
    )
    key = compensate_key(run_id, "call-2")
    assert ledger.effect_counts("compensate:restock")[key] == 1
    approvals = [r for r in read_audit(journal, run_id) if r.action.value == "compensation-approved"]
    assert len(approvals) == 1 and approvals[0].actor == outcomes[0].actor
