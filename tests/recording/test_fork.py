"""fork_run (docs/reference/tools-and-runs.md): copied records keep the identity of the run whose effect they are."""

from __future__ import annotations

from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    CompensatedRunError,
    InvalidInputError,
    Journal,
    RunExistsError,
    Tool,
    ToolCall,
    UnknownRunError,
    compensate_run,
    fork_run,
    resume_run,
    run_durable,
    scripted,
)
from saga_worker.journal.records import RecordStatus


class Ledger:
    """Tools that log every execute and compensate with the key they were given."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []

    def execute(self, input: Any, opts: CallOptions) -> Any:
        self.log.append(("execute", opts.idempotency_key))
        return {"ok": input}

    def compensate(self, input: Any, output: Any, opts: CallOptions) -> None:
        self.log.append(("compensate", opts.idempotency_key))

    def tools(self) -> dict[str, Tool]:
        return {
            "charge": Tool(self.execute, self.compensate),
            "email": Tool(self.execute, self.compensate, idempotency="args"),
        }


STEPS = (
    ToolCall("charge", {"n": 1}),
    [ToolCall("email", {"to": "a"}), ToolCall("charge", {"n": 2})],
    ToolCall("charge", {"n": 3}),
)


def three_step_run(journal: Journal, run_id: str, ledger: Ledger) -> None:
    assert (
        run_durable(
            run_id, journal=journal, tools=ledger.tools(), planner=scripted(*STEPS), prompt="order"
        ).status
        == "finished"
    )


def test_a_fork_copies_the_first_decisions_and_the_records_they_produced(
    journal: Journal, run_id: str
) -> None:
    ledger = Ledger()
    three_step_run(journal, run_id, ledger)
    assert fork_run(journal, run_id, 2, f"{run_id}-f") == f"{run_id}-f"
    assert journal.list_decisions(f"{run_id}-f") == journal.list_decisions(run_id)[:2]
    copied = journal.list_records(f"{run_id}-f")
    original = journal.list_records(run_id)
    assert [r.suffix for r in copied] == [r.suffix for r in original[:3]]
    assert all(r.origin_run_id == run_id and r.status is RecordStatus.SUCCEEDED for r in copied)
    assert [(r.input, r.output, r.step) for r in copied] == [
        (r.input, r.output, r.step) for r in original[:3]
    ]
    fork = journal.get_run(f"{run_id}-f")
    assert fork is not None and fork.source_run_id == run_id and fork.prompt == "order" and not fork.ended


def test_a_fork_at_step_zero_copies_nothing(journal: Journal, run_id: str) -> None:
    three_step_run(journal, run_id, Ledger())
    fork_run(journal, run_id, 0, "empty-fork")
    assert journal.list_decisions("empty-fork") == [] and journal.list_records("empty-fork") == []


def test_resuming_a_fork_replays_copied_calls_and_runs_new_ones_under_its_own_id(
    journal: Journal, run_id: str
) -> None:
    ledger = Ledger()
    three_step_run(journal, run_id, ledger)
    fork_run(journal, run_id, 1, "fork-b")
    ledger.log.clear()
    result = resume_run(
        "fork-b",
        journal=journal,
        tools=ledger.tools(),
        planner=scripted(ToolCall("charge", {"n": 1}), ToolCall("charge", {"n": 9})),
    )
    assert result.status == "finished"
    assert ledger.log == [("execute", "fork-b:call-2")]  # call-1 is replayed, never executed again
    assert [r.origin_run_id for r in journal.list_records("fork-b")] == [run_id, "fork-b"]


def test_copied_records_keep_the_origin_runs_keys_through_a_fork_of_a_fork(
    journal: Journal, run_id: str
) -> None:
    ledger = Ledger()
    three_step_run(journal, run_id, ledger)
    fork_run(journal, run_id, 3, "fork-1")
    fork_run(journal, "fork-1", 2, "fork-2")
    assert {r.origin_run_id for r in journal.list_records("fork-2")} == {run_id}
    ledger.log.clear()
    report = compensate_run("fork-2", journal=journal, tools=ledger.tools())
    email_suffix = journal.list_records(run_id)[1].suffix
    assert [(e.suffix, e.status.value, e.idempotency_key) for e in report.entries] == [
        ("call-3", "compensated", f"{run_id}:comp:call-3"),
        (email_suffix, "compensated", f"{run_id}:comp:{email_suffix}"),
        ("call-1", "compensated", f"{run_id}:comp:call-1"),
    ]
    assert ledger.log == [
        ("compensate", f"{run_id}:comp:call-3"),
        ("compensate", f"{run_id}:comp:{email_suffix}"),
        ("compensate", f"{run_id}:comp:call-1"),
    ]


def test_a_step_compensated_through_the_fork_reads_already_compensated_in_the_original(
    journal: Journal, run_id: str
) -> None:
    ledger = Ledger()
    three_step_run(journal, run_id, ledger)
    fork_run(journal, run_id, 1, "fork-c")
    compensate_run("fork-c", journal=journal, tools=ledger.tools())
    ledger.log.clear()
    report = compensate_run(run_id, journal=journal, tools=ledger.tools())
    statuses = {e.tool_call_id: e.status.value for e in report.entries}
    assert statuses["call-1"] == "already-compensated"
    assert {statuses["call-2"], statuses["call-3"], statuses["call-4"]} == {"compensated"}
    assert ("compensate", f"{run_id}:comp:call-1") not in ledger.log


def test_a_step_compensated_through_the_original_reads_already_compensated_in_the_fork(
    journal: Journal, run_id: str
) -> None:
    ledger = Ledger()
    three_step_run(journal, run_id, ledger)
    fork_run(journal, run_id, 2, "fork-d")
    fork_run(journal, "fork-d", 1, "fork-e")
    compensate_run(run_id, journal=journal, tools=ledger.tools())
    ledger.log.clear()
    for fork in ("fork-d", "fork-e"):
        report = compensate_run(fork, journal=journal, tools=ledger.tools())
        assert {e.status.value for e in report.entries} == {"already-compensated"}
    assert ledger.log == []


def test_a_fork_of_a_condemned_run_raises_and_writes_nothing(journal: Journal, run_id: str) -> None:
    three_step_run(journal, run_id, Ledger())
    compensate_run(run_id, journal=journal, tools={}, dry_run=False)
    with pytest.raises(CompensatedRunError):
        fork_run(journal, run_id, 1, "fork-x")
    assert journal.get_run("fork-x") is None and journal.list_records("fork-x") == []


def test_a_fork_into_a_condemned_run_id_raises(journal: Journal, run_id: str) -> None:
    three_step_run(journal, run_id, Ledger())
    compensate_run("taken", journal=journal)
    with pytest.raises(CompensatedRunError):
        fork_run(journal, run_id, 1, "taken")


def test_fork_refuses_an_existing_target_an_unknown_source_and_a_step_beyond_the_run(
    journal: Journal, run_id: str
) -> None:
    three_step_run(journal, run_id, Ledger())
    fork_run(journal, run_id, 1, "fork-y")
    with pytest.raises(RunExistsError):
        fork_run(journal, run_id, 1, "fork-y")
    with pytest.raises(UnknownRunError):
        fork_run(journal, "never-was", 1, "fork-z")
    with pytest.raises(InvalidInputError, match="4 decisions"):
        fork_run(journal, run_id, 5, "fork-z")
    with pytest.raises(InvalidInputError):
        fork_run(journal, run_id, 1, "bad:id")
    assert journal.get_run("fork-z") is None
