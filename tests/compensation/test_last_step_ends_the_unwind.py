"""A distributed unwind's last step ends the unwind in its outcome's commit (issue 45): when its report
is complete, the run's ``complete`` state and the ``unwound`` audit row go with the step's outcome and
entry, and the report the task stores is the one the journal's entries make, byte for byte; any other
end (an incomplete report, an entry stored first) writes the outcome alone and ends the unwind after
it, as before. On every journal."""

from __future__ import annotations

from typing import Any

from saga_worker import Journal, Tool, compensate_run
from saga_worker import executor as ex
from saga_worker.executor import Finalize, Step
from saga_worker.journal.records import AuditAction, AuditVia, ClaimStatus, NewAudit, UnwindEnd, UnwindState
from tests.compensation.order_chain import TTL, Provider, order, same_but_run
from tests.reads import run_of


def _steps(journal: Journal, tools: dict[str, Tool], run_id: str, unwind_id: str) -> Finalize:
    nxt = ex.start_unwind(journal, run_id, unwind_id, dry_run=False, claim_ttl=TTL)
    while isinstance(nxt, Step):
        got = ex.run_step(journal, tools, nxt.run_id, nxt.unwind_id, nxt.suffix, claim_ttl=TTL)
        assert got is not None
        nxt = got
    assert isinstance(nxt, Finalize)
    return nxt


def _unwound_rows(journal: Journal, run_id: str) -> list[dict[str, Any]]:
    return [dict(a.detail or {}) for a in journal.read_audit(run_id) if a.action is AuditAction.UNWOUND]


def test_the_last_step_writes_the_end_with_its_outcome_and_its_report_is_the_journals(
    journal: Journal, run_id: str
) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    order(journal, provider, run_id + "-twin")
    library = compensate_run(run_id + "-twin", journal=journal, tools=provider.tools())

    last = _steps(journal, provider.tools(), run_id, "u")

    # Ended before any report task: the state and the trail say so already.
    assert last.report is not None and last.info is not None
    assert run_of(journal, run_id).unwind_state is UnwindState.COMPLETE
    assert _unwound_rows(journal, run_id) == [
        {"counts": {"compensated": 3}, "complete": True, "unwind_id": "u"}
    ]
    stored = ex.finalize_unwind(journal, run_id, "u", info=last.info, ended=last.report)
    assert stored is last.report
    # The report assembled from the journal (a redelivered last step's) is the same, byte for byte,
    # as the in-process unwind's of an identical run; ending it again writes no second row.
    again = ex.finalize_unwind(journal, run_id, "u")
    assert again.model_dump_json() == stored.model_dump_json()
    assert stored.model_dump(mode="json") == same_but_run(library, run_id + "-twin", run_id)
    assert len(_unwound_rows(journal, run_id)) == 1


def test_an_unwind_whose_report_is_not_complete_ends_after_its_last_outcome(
    journal: Journal, run_id: str
) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    tools = provider.tools()
    del tools["notify"]  # the first step undone (call-3) has no tool here: uncertain, left for later

    last = _steps(journal, tools, run_id, "u")

    assert last.report is None  # nothing ended with the last outcome
    assert run_of(journal, run_id).unwind_state is UnwindState.PENDING
    assert _unwound_rows(journal, run_id) == []
    report = ex.finalize_unwind(journal, run_id, "u", info=last.info, ended=last.report)
    assert not report.complete
    assert [e.status.value for e in report.entries][1:] == ["compensated", "compensated"]
    assert run_of(journal, run_id).unwind_state is not UnwindState.COMPLETE
    assert len(_unwound_rows(journal, run_id)) == 1


def test_finish_step_ends_the_unwind_only_with_an_outcome_and_an_entry_of_its_own(
    journal: Journal, run_id: str
) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    journal.condemn(run_id)
    journal.insert_unwind("u", run_id, dry_run=False, suffixes=["call-3"])
    end = UnwindEnd(None, NewAudit(run_id, AuditAction.UNWOUND, "ann", AuditVia.WORKER, "", detail={"n": 1}))
    got = journal.claim_compensation(
        run_id, "call-3", via_run_id=run_id, owner="me", ttl=TTL, idempotency_key=f"{run_id}:call-3"
    )
    assert got.acquired
    journal.record_unwind_entry("u", 0, {"suffix": "call-3", "status": "busy"})  # there first
    first = journal.finish_step(
        run_id,
        "call-3",
        "me",
        ClaimStatus.COMPENSATED,
        unwind_id="u",
        position=0,
        won={"suffix": "call-3", "status": "compensated"},
        lost={"suffix": "call-3", "status": "busy"},
        end=end,
    )
    assert (first.written, first.ended) == (True, False)
    assert run_of(journal, run_id).unwind_state is UnwindState.PENDING
    assert _unwound_rows(journal, run_id) == []

    journal.insert_unwind("u2", run_id, dry_run=False, suffixes=["call-3"])
    lost = journal.finish_step(  # not the claim's owner (it is finished): the outcome is not written
        run_id,
        "call-3",
        "me",
        ClaimStatus.COMPENSATED,
        unwind_id="u2",
        position=0,
        won={"suffix": "call-3", "status": "compensated"},
        lost={"suffix": "call-3", "status": "busy"},
        end=end,
    )
    assert (lost.written, lost.ended, lost.entry["status"]) == (False, False, "busy")
    assert run_of(journal, run_id).unwind_state is UnwindState.PENDING
    assert _unwound_rows(journal, run_id) == []
