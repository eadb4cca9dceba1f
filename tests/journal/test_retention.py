"""Retention (``saga-worker db prune``): ended, settled runs go, each leaving a stub; nothing unresolved
ever goes; a pruned id never runs, resumes or unwinds again; the archive holds what went."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    CompensatedRunError,
    Finish,
    Journal,
    RunPrunedError,
    Tool,
    ToolCall,
    compensate_run,
    fork_run,
    resume_run,
    run_durable,
    saga,
)
from saga_worker.journal.records import NewRecord, RunStatus, UnwindState
from saga_worker.operating.retention import archive_file, plan_prune, prune
from tests.reads import run_of

pytestmark = pytest.mark.backends("memory", "sqlite", "postgres")

UNDONE: list[str] = []


def _undo(input: Any, output: Any, opts: CallOptions) -> None:
    UNDONE.append(opts.idempotency_key)


def _undo_fails(input: Any, output: Any, opts: CallOptions) -> None:
    raise RuntimeError("the provider said no")


TOOLS = {
    "charge": Tool(lambda i, o: {"charged": i}, _undo),
    "ship": Tool(lambda i, o: {"shipped": i}, _undo_fails),
    "reserve": Tool(lambda i, o: {"held": i}, _undo, compensate_needs_approval=True),
    "refund": Tool(lambda i, o: {"refunded": i}, _undo, needs_approval=True),
}


def order(*tools: str, error: bool = False) -> Any:
    """A planner that calls ``tools`` in turn, then finishes (or fails, with ``error``)."""
    calls = [ToolCall(t, {"n": n}) for n, t in enumerate(tools)]

    def plan(state: Any) -> Any:
        if state.step < len(calls):
            return [calls[state.step]]
        return Finish(error="out of stock") if error else Finish(text="done")

    return plan


def place(journal: Journal, run_id: str, *tools: str, error: bool = False) -> None:
    run_durable(run_id, journal=journal, tools=TOOLS, planner=order(*tools, error=error))


def _pruned(journal: Journal) -> list[str]:
    return sorted(r.run_id for r in journal.list_runs(limit=1000) if r.pruned)


def seed_every_kind(journal: Journal) -> dict[str, str]:
    """One run of each kind, named by what it is; returns the kind each is."""
    place(journal, "finished", "charge")
    place(journal, "failed", "charge", error=True)
    place(journal, "unwound", "charge")
    assert compensate_run("unwound", journal=journal, tools=TOOLS).complete
    journal.start_run("live", "")  # a run still going
    run_durable("suspended", journal=journal, tools=TOOLS, planner=order("charge", "refund"))
    place(journal, "gated", "charge", "reserve")
    compensate_run("gated", journal=journal, tools=TOOLS)  # halts at the gate: awaits a person
    place(journal, "halted", "charge", "ship")
    compensate_run("halted", journal=journal, tools=TOOLS)  # ship's undo fails: halted
    # An interrupted call (claimed, never settled) in a run some other path ended.
    journal.start_run("interrupted", "")
    journal.claim_record(
        "interrupted", NewRecord("s1", 1, "c1", "charge", "call", {}, "interrupted"), gated=True
    )
    journal.end_run("interrupted", RunStatus.FINISHED, "", None)
    # The same, then unwound: the call's effect cannot be known, the unwind stays uncertain.
    journal.start_run("uncertain", "")
    journal.claim_record("uncertain", NewRecord("s1", 1, "c1", "charge", "call", {}, "uncertain"), gated=True)
    journal.end_run("uncertain", RunStatus.FINISHED, "", None)
    compensate_run("uncertain", journal=journal, tools=TOOLS)
    place(journal, "condemned", "charge")
    journal.condemn("condemned")  # its unwind asked for, not yet done
    place(journal, "forked", "charge")
    fork_run(journal, "forked", 1, "fork-of-forked")  # the fork's unwind needs forked's claims
    return {
        "finished": "prune",
        "failed": "prune",
        "unwound": "prune",
        "live": "keep",
        "suspended": "keep",
        "gated": "keep",
        "halted": "keep",
        "interrupted": "keep",
        "uncertain": "keep",
        "condemned": "keep",
        "forked": "keep",
        "fork-of-forked": "keep",
    }


def test_prune_removes_ended_settled_runs_and_keeps_every_unresolved_kind(journal: Journal) -> None:
    kinds = seed_every_kind(journal)
    assert run_of(journal, "gated").unwind_state is UnwindState.AWAITING
    assert run_of(journal, "halted").unwind_state is UnwindState.INCOMPLETE
    assert run_of(journal, "uncertain").unwind_state is UnwindState.INCOMPLETE
    time.sleep(0.02)
    plan = plan_prune(journal, 0.01)
    assert plan.count == 3 and sorted(r.run_id for r in plan.sample) == ["failed", "finished", "unwound"]
    assert not _pruned(journal), "a dry run removes nothing"

    summary = prune(journal, 0.01, batch=2)

    assert (summary.pruned, summary.batches, summary.condemned) == (3, 2, 1)
    assert _pruned(journal) == sorted(k for k, v in kinds.items() if v == "prune")
    for run_id, kind in kinds.items():
        run = run_of(journal, run_id)
        if kind == "keep":
            assert not run.pruned and (journal.list_records(run_id) or run_id == "live"), run_id
    stub = run_of(journal, "failed")
    assert (stub.status, stub.prompt, stub.text, stub.error) == (RunStatus.FAILED, "", "", None)
    assert journal.list_records("failed") == [] and journal.list_decisions("failed") == []
    assert journal.read_audit("unwound") == [] and journal.list_unwinds("unwound") == []
    assert run_of(journal, "unwound").condemned, "the tombstone stays on the stub"
    size = journal.journal_size()
    assert (size.runs, size.pruned) == (len(kinds) - 3, 3)
    assert prune(journal, 0.01).pruned == 0, "pruning again finds nothing more"


def test_a_run_younger_than_the_age_is_kept(journal: Journal) -> None:
    place(journal, "recent", "charge")
    assert plan_prune(journal, 3600).count == 0
    assert prune(journal, 3600).pruned == 0 and not run_of(journal, "recent").pruned


def test_a_pruned_run_id_is_refused_everywhere_and_a_condemned_one_never_starts(journal: Journal) -> None:
    place(journal, "done", "charge")
    place(journal, "undone", "charge")
    compensate_run("undone", journal=journal, tools=TOOLS)
    time.sleep(0.02)
    assert prune(journal, 0.01).pruned == 2
    UNDONE.clear()

    for attempt in (
        lambda: run_durable("done", journal=journal, tools=TOOLS, planner=order("charge")),
        lambda: resume_run("done", journal=journal, tools=TOOLS, planner=order("charge")),
        lambda: compensate_run("done", journal=journal, tools=TOOLS, dry_run=True),
        lambda: compensate_run("undone", journal=journal, tools=TOOLS),
        lambda: fork_run(journal, "done", 0, "new"),
    ):
        with pytest.raises(RunPrunedError, match="was pruned from the journal"):
            attempt()
    with pytest.raises(RunPrunedError), saga("done", journal=journal, tools=TOOLS) as run:
        run.call("charge", {"n": 0})
    with pytest.raises(CompensatedRunError), saga("undone", journal=journal, tools=TOOLS) as run:
        run.call("charge", {"n": 0})
    with pytest.raises(CompensatedRunError):
        run_durable("undone", journal=journal, tools=TOOLS, planner=order("charge"))
    with pytest.raises(RunPrunedError):
        journal.fork("done", 0, "copy")  # the journal's own check, under the source's lock
    assert not run_of(journal, "done").condemned, "a plan condemns nothing"
    # An unwind asked of a pruned run condemns its stub (read with the tombstone, as every unwind
    # reads its run) and leaves it to a person: nothing can be undone from a journal that is gone.
    with pytest.raises(RunPrunedError):
        compensate_run("done", journal=journal, tools=TOOLS)
    stub = run_of(journal, "done")
    assert stub.unwind_state is UnwindState.ATTENTION and "pruned by retention" in (stub.unwind_note or "")
    assert journal.list_records("done") == [] and journal.list_records("undone") == []
    assert UNDONE == [], "no hook ran"


def test_the_archive_holds_each_pruned_run_with_its_calls_and_audit_rows(
    journal: Journal, tmp_path: Path
) -> None:
    place(journal, "kept-for-the-record", "charge", "charge")
    compensate_run("kept-for-the-record", journal=journal, tools=TOOLS, actor="ana", reason="refund asked")
    place(journal, "plain", "charge")
    time.sleep(0.02)
    path = tmp_path / "archive.jsonl"
    with archive_file(path) as archive:
        assert prune(journal, 0.01, archive=archive).pruned == 2

    lines = [json.loads(line) for line in path.read_text().splitlines()]
    by_id = {line["run"]["run_id"]: line for line in lines}
    assert sorted(by_id) == ["kept-for-the-record", "plain"]
    undone = by_id["kept-for-the-record"]
    assert undone["run"]["status"] == "finished" and undone["run"]["text"] == "done"
    assert len(undone["records"]) == 2 and len(undone["decisions"]) == 3 and len(undone["claims"]) == 2
    assert [a["action"] for a in undone["audit"]] == ["condemned", "unwound"]
    assert undone["audit"][0]["actor"] == "ana" and undone["audit"][0]["reason"] == "refund asked"
    assert len(undone["unwinds"]) == len(undone["unwind_entries"]) == 0  # in process: no worker's unwind
    assert by_id["plain"]["audit"] == [] and len(by_id["plain"]["records"]) == 1


def test_an_archive_that_fails_prunes_nothing(journal: Journal) -> None:
    place(journal, "safe", "charge")
    time.sleep(0.02)

    def broken(runs: Any) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        prune(journal, 0.01, archive=broken)
    assert not run_of(journal, "safe").pruned and journal.list_records("safe")
