"""A compensate hook's timeout and retry policy (docs/reference/tools-and-runs.md), in-process on every journal.

A hook that raises is retried within the unwind after the policy's backoff, with the same key; a hook
that hangs past its timeout reads failed, and its step stays claimed for as long as the hook may still
land: until its thread ends (its outcome is then written) or its process dies (the lease lapses).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    CompensationReport,
    Journal,
    RetryPolicy,
    Tool,
    compensate_run,
    open_journal,
    run_durable,
    scripted,
)
from saga_worker.errors import InvalidInputError
from saga_worker.journal.records import ClaimStatus, UnwindState
from tests.ledger import Ledger, open_ledger, order_script, order_tools
from tests.procs.unwind_child import kill_if_alive, result_of, spawn
from tests.reads import claim_of, run_of

RESERVE = "call-2"


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def statuses(report: CompensationReport) -> list[str]:
    return [e.status.value for e in report.entries]


def wait_until(predicate: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


def reserve_calls(ledger: Ledger, run_id: str) -> list[float]:
    """When the reserve step's compensate hook was entered, every time, all with its one key."""
    key = f"{run_id}:comp:{RESERVE}"
    calls = [c for c in ledger.calls() if c.what in ("entered:reserve", "compensate:reserve")]
    assert {c.key for c in calls} <= {key}, calls
    return [c.at for c in calls if c.what == "entered:reserve"]


def recorded(journal: Journal, run_id: str, ledger: Ledger) -> None:
    run_durable(run_id, journal=journal, tools=order_tools(ledger), planner=scripted(*order_script()))


# -- the policy's values ---------------------------------------------------------------------------------


def noop(*_: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Tool(noop, noop, compensate_timeout=0), "compensate_timeout"),
        (lambda: Tool(noop, noop, compensate_timeout=-1.0), "compensate_timeout"),
        (lambda: Tool(noop, noop, compensate_timeout=math.nan), "compensate_timeout"),
        (lambda: Tool(noop, noop, compensate_timeout=math.inf), "compensate_timeout"),
        (lambda: Tool(noop, noop, compensate_timeout=True), "compensate_timeout"),
        (lambda: Tool(noop, noop, compensate_timeout="5"), "compensate_timeout"),  # type: ignore[arg-type]  # the wrong type is the point
        (lambda: Tool(noop, noop, compensate_retry=3), "compensate_retry"),  # type: ignore[arg-type]  # the wrong type is the point
        (lambda: Tool(noop, compensate_timeout=5.0), "compensate_timeout"),
        (lambda: Tool(noop, compensate_retry=RetryPolicy(3)), "compensate_retry"),
        (lambda: RetryPolicy(0), "attempts"),
        (lambda: RetryPolicy(2.5), "attempts"),  # type: ignore[arg-type]  # the wrong type is the point
        (lambda: RetryPolicy(True), "attempts"),
        (lambda: RetryPolicy(3, initial_interval=-0.1), "initial_interval"),
        (lambda: RetryPolicy(3, initial_interval=math.nan), "initial_interval"),
        (lambda: RetryPolicy(3, backoff=0.5), "backoff"),
        (lambda: RetryPolicy(3, backoff=math.inf), "backoff"),
        (lambda: RetryPolicy(3, initial_interval=2.0, max_interval=1.0), "max_interval"),
        (lambda: RetryPolicy(3, max_interval=-1), "max_interval"),
    ],
)
def test_a_bad_policy_value_is_refused_with_an_error_naming_the_field(make: Any, field: str) -> None:
    with pytest.raises(InvalidInputError, match=rf"\b{field}=\.\.\."):
        make()


def test_defaults_keep_one_attempt_and_no_timeout() -> None:
    tool = Tool(noop, noop)
    assert tool.compensate_timeout is None
    assert tool.compensate_retry == RetryPolicy() and tool.compensate_retry.attempts == 1


def test_backoff_grows_by_its_coefficient_and_stops_at_the_cap() -> None:
    policy = RetryPolicy(6, initial_interval=0.5, backoff=3.0, max_interval=5.0)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.5, 4.5, 5.0, 5.0]
    assert RetryPolicy(3, initial_interval=2.0).max_interval == 200.0  # 100 x initial, as Temporal's
    assert RetryPolicy(10**6, initial_interval=1.0, backoff=10.0).delay(10**6) == 100.0


# -- retries -------------------------------------------------------------------------------------------


def test_a_hook_that_succeeds_on_attempt_2_reads_compensated_with_attempts_2_and_the_same_key(
    journal: Journal, run_id: str, stack: ExitStack
) -> None:
    ledger = stack.enter_context(open_ledger(journal.url))
    recorded(journal, run_id, ledger)
    failures = {"left": 1}

    def flaky(name: str, input: Any, output: Any, opts: CallOptions) -> None:
        if name == "reserve":
            ledger.call(opts.idempotency_key, "entered:reserve")
            if failures["left"]:
                failures["left"] -= 1
                raise RuntimeError("warehouse API: 503")

    policy = RetryPolicy(3, initial_interval=0.3)
    tools = order_tools(ledger, before_compensate=flaky, compensate_retry=policy)
    report = compensate_run(run_id, journal=journal, tools=tools)

    assert statuses(report) == ["compensated", "compensated", "compensated"]
    reserve = report.entries[1]
    assert reserve.attempts == 2 and reserve.error is None
    assert reserve.idempotency_key == f"{run_id}:comp:{RESERVE}"
    entered = reserve_calls(ledger, run_id)
    assert len(entered) == 2
    assert entered[1] - entered[0] >= 0.3  # the policy's first interval, waited out between them
    claim = journal.get_claim(run_id, RESERVE)
    assert claim is not None and claim.status is ClaimStatus.COMPENSATED and claim.attempts == 2
    assert ledger.effect_counts("compensate") == {f"{run_id}:comp:call-{n}": 1 for n in (1, 2, 3)}


def test_a_hook_that_keeps_failing_is_called_attempts_times_with_backoff_then_halts_the_unwind(
    journal: Journal, run_id: str, stack: ExitStack
) -> None:
    ledger = stack.enter_context(open_ledger(journal.url))
    recorded(journal, run_id, ledger)

    def broken(name: str, input: Any, output: Any, opts: CallOptions) -> None:
        if name == "reserve":
            ledger.call(opts.idempotency_key, "entered:reserve")
            raise RuntimeError("warehouse API: 503")

    policy = RetryPolicy(3, initial_interval=0.2, backoff=2.0)
    tools = order_tools(ledger, before_compensate=broken, compensate_retry=policy)
    report = compensate_run(run_id, journal=journal, tools=tools)

    assert statuses(report) == ["compensated", "failed", "not-attempted"]
    reserve = report.entries[1]
    assert reserve.attempts == 3
    assert reserve.error == "RuntimeError: warehouse API: 503 (attempt 3 of 3)"
    entered = reserve_calls(ledger, run_id)
    assert len(entered) == 3
    assert entered[1] - entered[0] >= 0.2 and entered[2] - entered[1] >= 0.4  # 0.2, then 0.2 x 2
    claim = journal.get_claim(run_id, RESERVE)
    assert claim is not None and claim.status is ClaimStatus.FAILED and claim.attempts == 3

    # The next unwind gets the policy's attempts again, with the same key.
    again = compensate_run(run_id, journal=journal, tools=order_tools(ledger, compensate_retry=policy))
    assert statuses(again) == ["already-compensated", "compensated", "compensated"]
    assert again.entries[1].attempts == 4
    assert ledger.effect_counts("compensate") == {f"{run_id}:comp:call-{n}": 1 for n in (1, 2, 3)}


def test_without_a_policy_a_failing_hook_is_called_once_and_its_error_is_unchanged(
    journal: Journal, run_id: str, stack: ExitStack
) -> None:
    ledger = stack.enter_context(open_ledger(journal.url))
    recorded(journal, run_id, ledger)

    def broken(name: str, input: Any, output: Any, opts: CallOptions) -> None:
        if name == "reserve":
            ledger.call(opts.idempotency_key, "entered:reserve")
            raise RuntimeError("warehouse API: 503")

    report = compensate_run(run_id, journal=journal, tools=order_tools(ledger, before_compensate=broken))
    assert statuses(report) == ["compensated", "failed", "not-attempted"]
    assert report.entries[1].error == "RuntimeError: warehouse API: 503"
    assert report.entries[1].attempts == 1
    assert len(reserve_calls(ledger, run_id)) == 1


# -- timeouts ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["returns", "raises"])
def test_a_hanging_hook_times_out_reads_failed_and_keeps_its_step_claimed_until_it_ends(
    journal: Journal, run_id: str, stack: ExitStack, ending: str
) -> None:
    ttl = 1.0
    ledger = stack.enter_context(open_ledger(journal.url))
    recorded(journal, run_id, ledger)
    release = threading.Event()
    stack.callback(release.set)

    def hangs(name: str, input: Any, output: Any, opts: CallOptions) -> None:
        if name == "reserve" and not release.is_set():
            ledger.call(opts.idempotency_key, "entered:reserve")
            release.wait(60)
            if ending == "raises":
                raise RuntimeError("warehouse API: gave up")

    policy = RetryPolicy(3, initial_interval=0.0)
    tools = order_tools(ledger, before_compensate=hangs, compensate_timeout=0.3, compensate_retry=policy)
    started = time.monotonic()
    report = compensate_run(run_id, journal=journal, tools=tools, claim_ttl=ttl)

    assert time.monotonic() - started < 30  # the unwind came back; the hook did not
    assert statuses(report) == ["compensated", "failed", "not-attempted"]
    reserve = report.entries[1]
    assert reserve.error is not None and reserve.error.startswith(
        "compensate hook timed out after 0.3s (attempt 1 of 3)"
    )
    assert reserve.attempts == 1  # no retry while the first call may still land
    held = journal.get_claim(run_id, RESERVE)
    assert held is not None and held.status is ClaimStatus.CLAIMED

    # Well past the lease: it is renewed while the hook runs, so nobody else may call the hook.
    time.sleep(ttl * 2.5)
    rival = compensate_run(run_id, journal=journal, tools=order_tools(ledger), claim_ttl=ttl)
    assert statuses(rival) == ["already-compensated", "busy", "not-attempted"]
    still = journal.get_claim(run_id, RESERVE)
    assert still is not None and still.status is ClaimStatus.CLAIMED and still.owner == held.owner
    assert len(reserve_calls(ledger, run_id)) == 1

    # The sweeper gave up on the step (it read busy every time) and flagged the run for a person.
    journal.set_unwind_state(run_id, UnwindState.ATTENTION, note="call-2: busy")
    release.set()  # the hook ends after all: what it did is the step's outcome
    wait_until(
        lambda: claim_of(journal, run_id, RESERVE).status is not ClaimStatus.CLAIMED,
        "the hook's late outcome",
    )
    # ... and the unwind, halted at this step, is due again for the steps after it.
    wait_until(lambda: run_of(journal, run_id).unwind_state is UnwindState.PENDING, "the unwind reopened")
    run = journal.get_run(run_id)
    assert run is not None and run.unwind_next_at is not None and run.unwind_next_at <= journal.now()
    late = journal.get_claim(run_id, RESERVE)
    assert late is not None
    after = compensate_run(run_id, journal=journal, tools=order_tools(ledger), claim_ttl=ttl)
    if ending == "returns":
        assert late.status is ClaimStatus.COMPENSATED
        assert statuses(after) == ["already-compensated", "already-compensated", "compensated"]
    else:
        assert late.status is ClaimStatus.FAILED
        assert late.error == "after its timeout: RuntimeError: warehouse API: gave up"
        assert statuses(after) == ["already-compensated", "compensated", "compensated"]
    hook_calls = [c for c in ledger.calls() if c.what in ("entered:reserve", "compensate:reserve")]
    assert {c.key for c in hook_calls} == {f"{run_id}:comp:{RESERVE}"}
    assert ledger.effect_counts("compensate") == {f"{run_id}:comp:call-{n}": 1 for n in (1, 2, 3)}


def test_a_hook_within_its_timeout_is_compensated_as_ever(
    journal: Journal, run_id: str, stack: ExitStack
) -> None:
    ledger = stack.enter_context(open_ledger(journal.url))
    recorded(journal, run_id, ledger)

    async def quick(input: Any, output: Any, opts: CallOptions) -> None:  # async hooks too
        ledger.call(opts.idempotency_key, "entered:reserve")

    tools = order_tools(ledger, compensate_timeout=30.0)
    tools["reserve"] = Tool(tools["reserve"].execute, quick, compensate_timeout=30.0)
    report = compensate_run(run_id, journal=journal, tools=tools)
    assert statuses(report) == ["compensated", "compensated", "compensated"]
    assert all(e.error is None and e.attempts == 1 for e in report.entries)
    assert len(reserve_calls(ledger, run_id)) == 1


def test_a_timed_out_hook_whose_process_exits_leaves_its_claim_to_lapse_then_it_is_redriven_with_the_same_key(
    shared_journal_url: str, run_id: str, stack: ExitStack
) -> None:
    ttl = 2.0
    journal = stack.enter_context(open_journal(shared_journal_url, migrate=True))
    ledger = stack.enter_context(open_ledger(shared_journal_url))
    recorded(journal, run_id, ledger)

    child = spawn(shared_journal_url, ledger.scope, run_id, mode="hang", step="reserve", ttl=ttl, timeout=0.5)
    stack.callback(kill_if_alive, child)
    out = result_of(child)  # the child's unwind returned, and the child exited with the hook still hanging
    entries = out["report"]["entries"]
    assert [e["status"] for e in entries] == ["compensated", "failed", "not-attempted"]
    assert entries[1]["error"].startswith("compensate hook timed out after 0.5s")

    claim = journal.get_claim(run_id, RESERVE)
    assert claim is not None and claim.status is ClaimStatus.CLAIMED
    assert f":{out['pid']}:" in claim.owner
    wait_until(lambda: journal.now() > claim.lease_expires_at, "the dead holder's lease to lapse")

    late = compensate_run(run_id, journal=journal, tools=order_tools(ledger), claim_ttl=ttl)
    assert statuses(late) == ["already-compensated", "compensated", "compensated"]
    assert late.entries[1].attempts == 2
    key = f"{run_id}:comp:{RESERVE}"
    hook_calls = [c for c in ledger.calls() if c.what in ("entered:reserve", "compensate:reserve")]
    assert [(c.key, c.what) for c in hook_calls] == [
        (key, "entered:reserve"),
        (key, "compensate:reserve"),
    ]


def test_a_workers_soft_time_limit_raised_in_the_hook_is_not_retried_and_releases_the_claim(
    journal: Journal, run_id: str, stack: ExitStack
) -> None:
    from celery.exceptions import SoftTimeLimitExceeded

    ledger = stack.enter_context(open_ledger(journal.url))
    recorded(journal, run_id, ledger)

    def out_of_time(name: str, input: Any, output: Any, opts: CallOptions) -> None:
        if name == "reserve":
            ledger.call(opts.idempotency_key, "entered:reserve")
            raise SoftTimeLimitExceeded()  # what Celery raises into a task past its soft_time_limit

    policy = RetryPolicy(3, initial_interval=0.0)
    tools = order_tools(ledger, before_compensate=out_of_time, compensate_retry=policy)
    report = compensate_run(run_id, journal=journal, tools=tools)

    assert statuses(report) == ["compensated", "failed", "not-attempted"]
    assert report.entries[1].attempts == 1 and "SoftTimeLimitExceeded" in (report.entries[1].error or "")
    assert len(reserve_calls(ledger, run_id)) == 1
    claim = journal.get_claim(run_id, RESERVE)
    assert claim is not None and claim.status is ClaimStatus.FAILED  # the hook unwound: it cannot land


def test_a_step_with_a_timeout_gets_celery_time_limits_covering_every_attempt_and_backoff() -> None:
    from saga_worker.executor import step_budget

    tool = Tool(noop, noop, compensate_timeout=2.0, compensate_retry=RetryPolicy(3, initial_interval=1.0))
    # 3 calls of 2 s, waits of 1 s and 2 s, two claim TTLs (a dead twin's lease) and 10 s of journal work
    assert step_budget(tool, 5.0) == 3 * 2.0 + 1.0 + 2.0 + 2 * 5.0 + 10.0
    assert step_budget(Tool(noop, noop, compensate_retry=RetryPolicy(3)), 5.0) is None  # no limit, as ever
    assert step_budget(Tool(noop, noop), 5.0) is None


def test_ctrl_c_while_waiting_for_a_hook_is_raised_and_the_hook_keeps_its_claim(
    journal: Journal, run_id: str, stack: ExitStack
) -> None:
    from saga_worker.compensation import hookcall

    ledger = stack.enter_context(open_ledger(journal.url))
    recorded(journal, run_id, ledger)
    release = threading.Event()
    stack.callback(release.set)

    def hangs(name: str, input: Any, output: Any, opts: CallOptions) -> None:
        if name == "notify":  # the first step of the unwind
            release.wait(60)

    def interrupted_wait(self: hookcall.HookCall, timeout: float) -> bool:
        self.interrupted = KeyboardInterrupt()  # as if Ctrl-C landed in the waiting thread
        return False

    stack.enter_context(pytest.MonkeyPatch.context()).setattr(hookcall.HookCall, "wait", interrupted_wait)
    tools = order_tools(ledger, before_compensate=hangs, compensate_timeout=30.0)
    with pytest.raises(KeyboardInterrupt):
        compensate_run(run_id, journal=journal, tools=tools)
    held = journal.get_claim(run_id, "call-3")
    assert held is not None and held.status is ClaimStatus.CLAIMED  # the hook may still land
    release.set()
    wait_until(
        lambda: claim_of(journal, run_id, "call-3").status is ClaimStatus.COMPENSATED,
        "the hook's outcome",
    )
