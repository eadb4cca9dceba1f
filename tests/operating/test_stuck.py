"""The inbox's stuck lane (issue 48, item 1), on every journal: an unwind halted at a failed step,
one holding an uncertain step, one begun and never finished, and a compensate request no worker took
are each listed with their step, attempts, last error and next sweep, and re-drive now applies to
them; a complete unwind and one halted at a gate are not in it."""

from __future__ import annotations

from typing import Any

from saga_worker import CallOptions, Journal, Tool, ToolCall, compensate_run, run_durable, scripted
from saga_worker import executor as ex
from saga_worker.operating import actions
from saga_worker.operating.inbox import inbox
from saga_worker.operating.stuck import stuck_unwinds


def refund_refused(input: Any, output: Any, opts: CallOptions) -> None:
    raise RuntimeError("the provider refused the refund")


def timed_out(input: Any, opts: CallOptions) -> Any:
    raise TimeoutError("provider timed out")


TOOLS = {
    "charge": Tool(lambda input, opts: {"charge_id": "ch_1"}, refund_refused),
    "hold": Tool(timed_out, lambda input, output, opts: None),  # no recover: nobody can tell
    "email": Tool(lambda input, opts: "sent", lambda input, output, opts: None),
    "gated": Tool(lambda input, opts: "ok", lambda input, output, opts: None, compensate_needs_approval=True),
}


def place(journal: Journal, run_id: str, *tools: str) -> None:
    run_durable(run_id, journal=journal, tools=TOOLS, planner=scripted(*(ToolCall(t, {}) for t in tools)))


class Sent(list[str]):
    """An ``Enqueue`` that keeps what it was handed (the workers' queue, for a test of the actions)."""

    def __call__(self, run_id: str, dry_run: bool, **request: Any) -> str:
        self.append(run_id)
        return str(request.get("task_id") or f"task-{len(self)}")


def lane(journal: Journal) -> dict[str, dict[str, Any]]:
    items, more = stuck_unwinds(journal)
    assert not more
    return {i["run_id"]: i for i in items}


def test_a_halted_failed_unwind_is_stuck_at_its_step_with_attempts_error_next_sweep_and_a_redrive(
    journal: Journal,
) -> None:
    place(journal, "order-1", "charge", "email")
    compensate_run("order-1", journal=journal, tools=TOOLS)
    item = lane(journal)["order-1"]
    assert (item["kind"], item["why"], item["suffix"], item["tool_name"]) == (
        "stuck",
        "failed",
        "call-1",
        "charge",
    )
    assert item["attempts"] == 1 and "the provider refused the refund" in item["error"]
    assert item["next_sweep_at"] is not None and item["next_sweep_iso"].endswith("Z")
    assert [a["name"] for a in item["actions"]] == ["redrive"]
    found = inbox(journal)
    assert found["items"] == []  # nothing waits for a person's decision: the lane is beside them
    assert found["stuck"]["count"] == 1 and found["stuck"]["oldest_s"] is not None
    sent = Sent()
    task = actions.redrive("order-1", journal=journal, enqueue=sent, actor="ann", claim_ttl=5.0)
    assert task and sent == ["order-1"]


def test_an_uncertain_step_is_stuck_and_says_its_outcome_was_never_known(journal: Journal) -> None:
    place(journal, "order-2", "hold")
    report = compensate_run("order-2", journal=journal, tools=TOOLS)
    assert [e.status.value for e in report.entries] == ["uncertain"]
    item = lane(journal)["order-2"]
    assert (item["why"], item["suffix"], item["tool_name"]) == ("uncertain", "call-1", "hold")
    assert "provider timed out" in item["error"]


def test_an_unwind_begun_and_never_finished_is_stuck_as_unfinished(journal: Journal) -> None:
    place(journal, "order-3", "charge", "email")
    ex.start_unwind(journal, "order-3", "unwind-3", dry_run=False, claim_ttl=5.0)  # and its worker died
    item = lane(journal)["order-3"]
    assert item["why"] == "unfinished" and item["unwind_state"] == "pending"


def test_a_compensate_no_worker_took_is_in_the_lane_as_queued_until_its_unwind_begins(
    journal: Journal,
) -> None:
    place(journal, "order-4", "email")
    task = actions.request_unwind(
        "order-4", journal=journal, enqueue=Sent(), actor="ann", reason="customer cancelled"
    )
    item = lane(journal)["order-4"]
    assert (item["why"], item["queued_task_id"], item["actions"]) == ("queued", task, [])
    assert item["queued_at_iso"].endswith("Z")
    ex.start_unwind(journal, "order-4", task, dry_run=False, claim_ttl=5.0)  # a worker takes it
    assert lane(journal)["order-4"]["why"] == "unfinished"  # begun, not finished: no longer queued
    assert lane(journal)["order-4"]["queued_at"] is None


def test_complete_unwinds_and_those_at_a_gate_are_not_stuck(journal: Journal) -> None:
    place(journal, "order-5", "email")
    compensate_run("order-5", journal=journal, tools=TOOLS)
    place(journal, "order-6", "gated")
    assert compensate_run("order-6", journal=journal, tools=TOOLS).halt is not None
    assert lane(journal) == {}
