"""Every path that can start an execute goes through the one atomic tombstone-gate-and-claim step
(issue 21, item 3), on every journal: the run is condemned inside the window between a call's
checks and its claim (fault point ``before_gate``), and the ledger shows that nothing executed.

Paths: a first call, a retry of an interrupted idempotent call, a call ``recover`` says did not
happen, an approved call, a cross-run call's first shared execution, a cross-run call re-settling a
failed shared execution, and a forward task (``record_call``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    CompensatedRunError,
    Journal,
    RecoverResult,
    Tool,
    ToolCall,
    approve,
    compensate_run,
    resume_run,
    run_durable,
    scripted,
)
from saga_worker.celery.forward import record_call
from saga_worker.core import faults
from saga_worker.core.keys import hash16
from saga_worker.journal.records import RecordStatus
from tests.ledger import Ledger
from tests.reads import latest_shared_of, record_of

INPUT = {"amount": 10}
SHARED_KEY = f"notify:{hash16(INPUT)}"

Arm = Callable[[str], AbstractContextManager[list[str]]]


class Crash(BaseException):
    """The process dies inside ``execute``, before any effect: the record is left ``running``."""


@pytest.fixture
def condemn_inside_the_window(journal: Journal) -> Iterator[Arm]:
    """``with arm(run_id) as fired:`` condemns ``run_id`` the first time a call reaches the point
    between its checks and its gate-and-claim step; ``fired`` lists the keys it fired at."""
    was_enabled = faults.enabled()
    faults.enable()

    class Window:
        def __init__(self, run_id: str) -> None:
            self.run_id = run_id
            self.fired: list[str] = []
            self._armed: AbstractContextManager[None] | None = None

        def condemn(self, name: str, key: str) -> None:
            self.fired.append(key)
            journal.condemn(self.run_id)

        def __enter__(self) -> list[str]:
            self._armed = faults.calling("before_gate", self.condemn, times=1)
            self._armed.__enter__()
            return self.fired

        def __exit__(self, *exc: Any) -> None:
            assert self._armed is not None
            self._armed.__exit__(*exc)

    yield Window
    if not was_enabled:
        faults.disable()


def tools_for(ledger: Ledger, *, crash_first: bool = False, fail_first: bool = False, **options: Any) -> Tool:
    attempts: list[str] = []

    def execute(input: Any, opts: CallOptions) -> Any:
        attempts.append(opts.idempotency_key)
        if crash_first and len(attempts) == 1:
            raise Crash
        if fail_first and len(attempts) == 1:
            raise TimeoutError("provider timed out before charging")
        ledger.effect(opts.idempotency_key, "execute")
        return {"ok": True}

    def compensate(input: Any, output: Any, opts: CallOptions) -> None:
        ledger.effect(opts.idempotency_key, "compensate")

    return Tool(execute, compensate, **options)


def nothing_executed(ledger: Ledger, journal: Journal, run_id: str) -> None:
    assert ledger.call_counts("execute") == {}
    report = compensate_run(run_id, journal=journal, tools={})
    assert report.condemned
    assert ledger.call_counts("compensate") == {}


def test_a_first_call_condemned_inside_the_window_executes_nothing(
    journal: Journal, ledger: Ledger, run_id: str, condemn_inside_the_window: Arm
) -> None:
    tools = {"charge": tools_for(ledger)}
    with condemn_inside_the_window(run_id) as fired, pytest.raises(CompensatedRunError):
        run_durable(run_id, journal=journal, tools=tools, planner=scripted(ToolCall("charge", INPUT)))
    assert fired == [f"{run_id}:call-1"]
    assert journal.get_record(run_id, "call-1") is None
    nothing_executed(ledger, journal, run_id)


def test_a_retry_of_an_interrupted_call_condemned_inside_the_window_executes_nothing(
    journal: Journal,
    ledger: Ledger,
    run_id: str,
    condemn_inside_the_window: Arm,
    set_claim_ttl: Callable[[float], None],
) -> None:
    set_claim_ttl(1.0)  # the crashed call's execute lease lapses at once (PostgreSQL waits it out)
    tools = {"charge": tools_for(ledger, crash_first=True, idempotent=True)}
    planner = scripted(ToolCall("charge", INPUT))
    with pytest.raises(Crash):
        run_durable(run_id, journal=journal, tools=tools, planner=planner)
    with condemn_inside_the_window(run_id) as fired, pytest.raises(CompensatedRunError):
        resume_run(run_id, journal=journal, tools=tools, planner=planner)
    assert fired == [f"{run_id}:call-1"]
    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.status is RecordStatus.RUNNING and record.attempts == 1
    nothing_executed(ledger, journal, run_id)


def test_a_call_recover_says_did_not_happen_condemned_inside_the_window_executes_nothing(
    journal: Journal,
    ledger: Ledger,
    run_id: str,
    condemn_inside_the_window: Arm,
    set_claim_ttl: Callable[[float], None],
) -> None:
    set_claim_ttl(1.0)
    asked: list[str] = []

    def recover(input: Any, opts: CallOptions) -> RecoverResult:
        asked.append(opts.idempotency_key)
        return RecoverResult(done=False)

    tools = {"charge": tools_for(ledger, crash_first=True, recover=recover)}
    planner = scripted(ToolCall("charge", INPUT))
    with pytest.raises(Crash):
        run_durable(run_id, journal=journal, tools=tools, planner=planner)
    with condemn_inside_the_window(run_id) as fired, pytest.raises(CompensatedRunError):
        resume_run(run_id, journal=journal, tools=tools, planner=planner)
    assert asked == [f"{run_id}:call-1"] and fired == [f"{run_id}:call-1"]
    nothing_executed(ledger, journal, run_id)


def test_an_approved_call_condemned_inside_the_window_executes_nothing(
    journal: Journal, ledger: Ledger, run_id: str, condemn_inside_the_window: Arm
) -> None:
    tools = {"charge": tools_for(ledger, needs_approval=True)}
    planner = scripted(ToolCall("charge", INPUT))
    assert run_durable(run_id, journal=journal, tools=tools, planner=planner).status == "suspended"
    approve(journal, run_id, "call-1", actor="alice")
    with condemn_inside_the_window(run_id) as fired, pytest.raises(CompensatedRunError):
        resume_run(run_id, journal=journal, tools=tools, planner=planner)
    assert fired == [f"{run_id}:call-1"]
    assert record_of(journal, run_id, "call-1").status is RecordStatus.APPROVED
    nothing_executed(ledger, journal, run_id)


def test_a_shared_execution_condemned_inside_the_window_never_starts(
    journal: Journal, ledger: Ledger, run_id: str, condemn_inside_the_window: Arm
) -> None:
    tools = {"notify": tools_for(ledger, idempotency="cross-run", window_s=60)}
    with condemn_inside_the_window(run_id) as fired, pytest.raises(CompensatedRunError):
        run_durable(run_id, journal=journal, tools=tools, planner=scripted(ToolCall("notify", INPUT)))
    assert fired == [SHARED_KEY]
    assert journal.latest_shared(SHARED_KEY) is None
    nothing_executed(ledger, journal, run_id)


def test_a_failed_shared_execution_re_settled_by_a_run_condemned_inside_the_window_is_not_executed(
    journal: Journal, ledger: Ledger, run_id: str, condemn_inside_the_window: Arm
) -> None:
    tools = {
        "notify": tools_for(ledger, fail_first=True, idempotent=True, idempotency="cross-run", window_s=60)
    }
    planner = scripted(ToolCall("notify", INPUT))
    first = run_durable(run_id + "-a", journal=journal, tools=tools, planner=planner)
    assert first.status == "failed"
    assert latest_shared_of(journal, SHARED_KEY).status.value == "failed"
    # Run B meets the failed shared execution within its window and would execute it again.
    with condemn_inside_the_window(run_id) as fired, pytest.raises(CompensatedRunError):
        run_durable(run_id, journal=journal, tools=tools, planner=planner)
    assert fired == [SHARED_KEY]
    shared = journal.latest_shared(SHARED_KEY)
    assert shared is not None and shared.status.value == "failed" and shared.attempts == 1
    nothing_executed(ledger, journal, run_id)


def test_a_forward_task_condemned_inside_the_window_executes_nothing(
    journal: Journal, ledger: Ledger, run_id: str, condemn_inside_the_window: Arm
) -> None:
    tools = {"charge": tools_for(ledger)}
    record_call(run_id, "charge", {"amount": 1}, id="charge-1", journal=journal, tools=tools)
    with condemn_inside_the_window(run_id) as fired, pytest.raises(CompensatedRunError):
        record_call(run_id, "charge", INPUT, id="charge-2", journal=journal, tools=tools)
    assert fired == [f"{run_id}:charge-2"]
    assert journal.get_record(run_id, "charge-2") is None
    assert ledger.call_counts("execute") == {f"{run_id}:charge-1": 1}
