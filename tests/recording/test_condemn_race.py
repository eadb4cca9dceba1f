"""The tombstone and a tool call's claim are one atomic step (docs/reference/safety.md): however they race, every
claimed call is in the unwind's worklist and no call is claimed once the tombstone is committed."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    CompensatedRunError,
    Journal,
    Tool,
    ToolCall,
    compensate_run,
    run_compensated,
    run_durable,
)
from saga_worker.journal.records import NewRecord

THREADS = 6


def claim_until_refused(
    journal: Journal,
    run_id: str,
    worker: int,
    claimed: list[str],
    outcome: dict[int, Any],
    started: threading.Event,
) -> None:
    try:
        for n in range(100_000):
            suffix = f"w{worker}-{n}"
            new = NewRecord(suffix, 1, suffix, "charge", "call", {"n": n}, run_id)
            if journal.claim_record(run_id, new, gated=True) is not None:
                claimed.append(suffix)
                if len(claimed) >= 3 * THREADS:
                    started.set()
        outcome[worker] = "never refused"
    except CompensatedRunError:
        outcome[worker] = "refused"
    except BaseException as exc:  # reported by the test below
        outcome[worker] = exc


@pytest.mark.parametrize("round_", range(3))
def test_every_call_claimed_while_the_run_is_condemned_is_in_the_unwind_and_none_comes_after(
    journal: Journal, run_id: str, round_: int
) -> None:
    journal.start_run(run_id, "race")
    claimed: list[str] = []
    outcome: dict[int, Any] = {}
    started = threading.Event()
    threads = [
        threading.Thread(target=claim_until_refused, args=(journal, run_id, w, claimed, outcome, started))
        for w in range(THREADS)
    ]
    for t in threads:
        t.start()
    assert started.wait(timeout=60)

    report = compensate_run(run_id, journal=journal, tools=None)  # condemns while the claims pour in

    for t in threads:
        t.join(timeout=60)
    assert outcome == dict.fromkeys(range(THREADS), "refused")
    unwound = {e.suffix for e in report.entries}
    assert set(claimed) == unwound  # every claim that succeeded is in the worklist ...
    assert {
        r.suffix for r in journal.list_records(run_id)
    } == unwound  # ... and none was made after it was read
    assert {e.status.value for e in report.entries} == {"uncertain"}  # running records, no tools to ask


def test_tombstone_racing_the_start_of_a_run_is_always_written(journal: Journal, run_id: str) -> None:
    errors: list[BaseException] = []
    for n in range(40):
        rid = f"{run_id}-{n}"
        gate = threading.Barrier(2)
        started: list[bool] = []

        def start(rid: str = rid, gate: threading.Barrier = gate, started: list[bool] = started) -> None:
            gate.wait(timeout=30)
            try:
                journal.start_run(rid, "race")
                started.append(True)
            except CompensatedRunError:
                started.append(False)
            except BaseException as exc:
                errors.append(exc)

        def condemn(rid: str = rid, gate: threading.Barrier = gate) -> None:
            gate.wait(timeout=30)
            try:
                assert isinstance(journal.condemn(rid), float)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=start), threading.Thread(target=condemn)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == []
        assert run_compensated(journal, rid)
        with pytest.raises(CompensatedRunError):
            journal.claim_record(rid, NewRecord("call-1", 1, "call-1", "charge", "call", {}, rid), gated=True)


def test_live_run_racing_its_condemnation_executes_nothing_the_unwind_does_not_see(
    journal: Journal, run_id: str
) -> None:
    executed: list[str] = []

    def execute(input: Any, opts: CallOptions) -> Any:
        executed.append(opts.tool_call_id)
        return {"ok": True}

    tools = {"charge": Tool(execute, lambda i, o, opts: None)}
    outcomes: list[Any] = []

    def endless_run() -> None:
        try:
            run_durable(
                run_id,
                journal=journal,
                tools=tools,
                max_steps=100_000,
                planner=lambda state: [ToolCall("charge", {"n": state.step})],
            )
            outcomes.append("ended")
        except CompensatedRunError:
            outcomes.append("refused")
        except BaseException as exc:  # reported below
            outcomes.append(exc)

    runner = threading.Thread(target=endless_run)
    runner.start()
    deadline = time.monotonic() + 30
    while len(executed) < 5 and time.monotonic() < deadline:
        time.sleep(0.005)

    report = compensate_run(run_id, journal=journal, tools=tools)
    runner.join(timeout=60)

    assert outcomes == ["refused"]
    unwound = {e.suffix for e in report.entries}
    assert set(executed) <= unwound  # every call that started is undone (or reported) by the unwind
    assert {r.suffix for r in journal.list_records(run_id)} == unwound
