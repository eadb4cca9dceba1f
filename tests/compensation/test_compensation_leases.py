"""Claims and leases (docs/reference/compensation.md "Calling again resumes", docs/reference/safety.md): a dead holder's step is re-driven with the same key once
its lease expires, a live holder's lease is renewed while its hook runs, and a holder that lost its
lease never overwrites the new owner's outcome."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from saga_worker import (
    CallOptions,
    CompensationReport,
    Journal,
    compensate_run,
    open_journal,
    run_durable,
    scripted,
)
from saga_worker.compensation.carry import LEASE_LOST
from saga_worker.core import leases
from saga_worker.core.leases import LeaseKeeper
from saga_worker.journal import boot_clock
from saga_worker.journal.records import ClaimAttempt, ClaimStatus, CompensationClaim
from saga_worker.journal.schema import claims
from saga_worker.journal.sql import SqlJournal
from saga_worker.locks import MemoryStepLock, StepLock
from saga_worker.locks.redis import RedisStepLock
from tests.ledger import open_ledger, order_script, order_tools
from tests.procs.unwind_child import EXIT_CODE, kill_if_alive, result_of, spawn

RESERVE = "call-2"


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def statuses(report: CompensationReport) -> list[str]:
    return [e.status.value for e in report.entries]


def setting(event: threading.Event) -> Callable[[], bool]:
    """A lease's renew callback that sets ``event`` and says the lease is kept."""

    def renew() -> bool:
        event.set()
        return True

    return renew


def wait_until(predicate: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def wait_for_expiry(journal: Journal, claim: CompensationClaim) -> None:
    # A little past the deadline it shows: a journal judges the lease on a clock that cannot step (the
    # server's, this boot's monotonic one), read a moment apart from the wall clock shown here.
    wait_until(lambda: journal.now() > claim.lease_expires_at + 0.05, "the lease to expire")


# -- a holder killed inside its hook ------------------------------------------------------------------


@pytest.mark.parametrize("death", ["os._exit", "SIGKILL"])
def test_unwinder_killed_inside_a_hook_leaves_its_step_claimed_until_the_lease_expires_then_it_is_redriven(
    shared_journal_url: str, run_id: str, death: str, stack: ExitStack
) -> None:
    journal = stack.enter_context(open_journal(shared_journal_url, migrate=True))
    ledger = stack.enter_context(open_ledger(shared_journal_url))
    tools = order_tools(ledger)
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order_script()))
    key = f"{run_id}:comp:{RESERVE}"

    child = spawn(
        shared_journal_url,
        ledger.scope,
        run_id,
        mode="exit" if death == "os._exit" else "hang",
        step="reserve",
        ttl=3,
    )
    stack.callback(kill_if_alive, child)
    if death == "os._exit":
        child.communicate(timeout=60)
        assert child.returncode == EXIT_CODE
    else:
        wait_until(lambda: ledger.calls("entered:reserve") != [], "the child to enter the reserve hook")
        # While the holder lives, its lease is renewed: a rival reads busy however long the hook takes.
        assert statuses(compensate_run(run_id, journal=journal, tools=tools, claim_ttl=3)) == [
            "already-compensated",
            "busy",
            "not-attempted",
        ]
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=60)
        assert child.returncode == -signal.SIGKILL

    claim = journal.get_claim(run_id, RESERVE)
    assert claim is not None and claim.status is ClaimStatus.CLAIMED
    assert f":{child.pid}:" in claim.owner
    assert [c.key for c in ledger.calls("entered:reserve")] == [key]

    early = compensate_run(run_id, journal=journal, tools=tools, claim_ttl=3)
    lease_still_live = journal.now() < claim.lease_expires_at
    if lease_still_live:  # (always, unless this machine stalled for seconds after the kill)
        assert statuses(early) == ["already-compensated", "busy", "not-attempted"]
        assert journal.get_claim(run_id, RESERVE) == claim
        assert ledger.effect_counts("compensate") == {f"{run_id}:comp:call-3": 1}

    wait_for_expiry(journal, claim)
    late = compensate_run(run_id, journal=journal, tools=tools, claim_ttl=3)

    assert statuses(late)[1:] == ["compensated", "compensated"]
    assert late.entries[1].idempotency_key == key
    after = journal.get_claim(run_id, RESERVE)
    assert after is not None and after.status is ClaimStatus.COMPENSATED and after.attempts == 2
    assert after.idempotency_key == key
    assert ledger.effect_counts("compensate") == {f"{run_id}:comp:call-{n}": 1 for n in (1, 2, 3)}
    reserve_calls = [c for c in ledger.calls() if c.key == key]
    assert [(c.what, c.pid == child.pid) for c in reserve_calls] == [
        ("entered:reserve", True),
        ("compensate:reserve", False),
    ]


# -- a live holder keeps its lease ----------------------------------------------------------------------


def test_lease_is_renewed_while_a_slow_hook_runs_so_a_rival_never_steals_the_step(
    journal: Journal, run_id: str, stack: ExitStack
) -> None:
    ttl = 1.0
    ledger = stack.enter_context(open_ledger(journal.url))
    entered, release = threading.Event(), threading.Event()

    def slow_reserve(name: str, input: Any, output: Any, opts: CallOptions) -> None:
        if name == "reserve" and not entered.is_set():
            entered.set()
            release.wait(timeout=60)

    tools = order_tools(ledger, before_compensate=slow_reserve)
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order_script()))
    holder_reports: list[CompensationReport] = []
    holder = threading.Thread(
        target=lambda: holder_reports.append(
            compensate_run(run_id, journal=journal, tools=tools, claim_ttl=ttl)
        )
    )
    holder.start()
    stack.callback(holder.join, 60)
    stack.callback(release.set)
    assert entered.wait(timeout=30)
    claim = journal.get_claim(run_id, RESERVE)
    assert claim is not None

    rival_tries = 0
    while journal.now() < claim.started_at + 3 * ttl:  # the hook outlives three whole leases
        rival = compensate_run(run_id, journal=journal, tools=tools, claim_ttl=ttl)
        assert statuses(rival) == ["already-compensated", "busy", "not-attempted"]
        rival_tries += 1
        time.sleep(ttl / 4)
    held = journal.get_claim(run_id, RESERVE)
    assert held is not None and held.owner == claim.owner and held.attempts == 1
    assert held.lease_expires_at > claim.lease_expires_at  # renewed, not merely long

    release.set()
    holder.join(timeout=60)

    assert rival_tries >= 3
    assert statuses(holder_reports[0]) == ["compensated"] * 3
    assert ledger.call_counts("compensate") == {f"{run_id}:comp:call-{n}": 1 for n in (1, 2, 3)}


# -- a holder that lost its lease ---------------------------------------------------------------------------


def test_holder_whose_lease_was_taken_over_cannot_renew_or_write_an_outcome(
    journal: Journal, run_id: str
) -> None:
    key = f"{run_id}:comp:{RESERVE}"
    first = journal.claim_compensation(
        run_id, RESERVE, via_run_id=run_id, owner="old", ttl=0.2, idempotency_key=key
    )
    assert first.acquired and first.claim is not None
    busy = journal.claim_compensation(
        run_id, RESERVE, via_run_id=run_id, owner="rival", ttl=60, idempotency_key=key
    )
    assert not busy.acquired and busy.claim == journal.get_claim(run_id, RESERVE) == first.claim
    wait_for_expiry(journal, first.claim)

    second = journal.claim_compensation(
        run_id, RESERVE, via_run_id=run_id, owner="new", ttl=60, idempotency_key=key
    )
    assert second.acquired and second.claim is not None
    assert (second.claim.owner, second.claim.attempts, second.claim.idempotency_key) == ("new", 2, key)

    assert not journal.renew_claim(run_id, RESERVE, "old", 60)
    assert not journal.finish_claim(run_id, RESERVE, "old", ClaimStatus.COMPENSATED)
    assert journal.get_claim(run_id, RESERVE) == second.claim
    assert journal.finish_claim(run_id, RESERVE, "new", ClaimStatus.FAILED, "provider said no")
    assert not journal.finish_claim(run_id, RESERVE, "old", ClaimStatus.COMPENSATED)
    final = journal.get_claim(run_id, RESERVE)
    assert final is not None
    assert (final.status, final.owner, final.error) == (ClaimStatus.FAILED, "new", "provider said no")


def test_compensated_step_cannot_be_claimed_again_even_after_its_lease_time(
    journal: Journal, run_id: str
) -> None:
    key = f"{run_id}:comp:{RESERVE}"
    taken = journal.claim_compensation(
        run_id, RESERVE, via_run_id=run_id, owner="a", ttl=0.1, idempotency_key=key
    )
    assert taken.claim is not None and journal.finish_claim(run_id, RESERVE, "a", ClaimStatus.COMPENSATED)
    wait_for_expiry(journal, taken.claim)

    again = journal.claim_compensation(
        run_id, RESERVE, via_run_id=run_id, owner="b", ttl=60, idempotency_key=key
    )

    assert not again.acquired and again.claim is not None
    assert (again.claim.status, again.claim.owner) == (ClaimStatus.COMPENSATED, "a")


def test_unwinder_that_lost_its_lease_mid_hook_leaves_the_new_owners_outcome_standing(
    journal: Journal, run_id: str, stack: ExitStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first holder's renewals stall (a frozen VM, a long GC pause): its lease lapses mid-hook.
    monkeypatch.setattr(leases.keeper, "hold", lambda renew, interval: lambda: None)
    ledger = stack.enter_context(open_ledger(journal.url))
    entered, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def reserve_hook(name: str, input: Any, output: Any, opts: CallOptions) -> None:
        if name != "reserve":
            return
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            entered.set()
            release.wait(timeout=60)
        else:
            raise RuntimeError("provider said no")

    tools = order_tools(ledger, before_compensate=reserve_hook)
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order_script()))
    stale: list[CompensationReport] = []
    holder = threading.Thread(
        name="stale",
        target=lambda: stale.append(compensate_run(run_id, journal=journal, tools=tools, claim_ttl=0.3)),
    )
    holder.start()
    stack.callback(holder.join, 60)
    stack.callback(release.set)
    assert entered.wait(timeout=30)
    claim = journal.get_claim(run_id, RESERVE)
    assert claim is not None
    wait_for_expiry(journal, claim)

    takeover = compensate_run(run_id, journal=journal, tools=tools, claim_ttl=60)
    assert statuses(takeover) == ["already-compensated", "failed", "not-attempted"]
    owned = journal.get_claim(run_id, RESERVE)
    assert owned is not None and owned.status is ClaimStatus.FAILED and owned.owner != claim.owner

    release.set()
    holder.join(timeout=60)

    assert journal.get_claim(run_id, RESERVE) == owned  # the stale holder's success was not written over it
    entry = stale[0].entries[1]
    assert (entry.status.value, entry.error) == ("busy", LEASE_LOST)  # the step is the new owner's
    assert len(calls) == 2


def test_two_holders_of_one_step_never_both_report_it_compensated(
    journal: Journal, run_id: str, stack: ExitStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first holder's renewals stall (a frozen VM, a long GC pause): its lease lapses mid-hook, a
    # rival takes the step over and undoes it, then the first hook returns too.
    monkeypatch.setattr(leases.keeper, "hold", lambda renew, interval: lambda: None)
    ledger = stack.enter_context(open_ledger(journal.url))
    entered, release = threading.Event(), threading.Event()

    def reserve_hook(name: str, input: Any, output: Any, opts: CallOptions) -> None:
        if name == "reserve" and not entered.is_set():
            entered.set()
            release.wait(timeout=60)

    tools = order_tools(ledger, before_compensate=reserve_hook)
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order_script()))
    stale: list[CompensationReport] = []
    holder = threading.Thread(
        target=lambda: stale.append(compensate_run(run_id, journal=journal, tools=tools, claim_ttl=0.3))
    )
    holder.start()
    stack.callback(holder.join, 60)
    stack.callback(release.set)
    assert entered.wait(timeout=30)
    claim = journal.get_claim(run_id, RESERVE)
    assert claim is not None
    wait_for_expiry(journal, claim)
    takeover = compensate_run(run_id, journal=journal, tools=tools, claim_ttl=60)
    release.set()
    holder.join(timeout=60)

    assert statuses(takeover) == ["already-compensated", "compensated", "compensated"]
    assert statuses(stale[0]) == ["compensated", "busy", "not-attempted"]
    assert stale[0].entries[1].error == LEASE_LOST
    owned = journal.get_claim(run_id, RESERVE)
    assert owned is not None and owned.status is ClaimStatus.COMPENSATED and owned.owner != claim.owner
    # Both hooks ran (the frozen holder's too, with the same key: the provider deduplicates on it).
    assert ledger.call_counts("compensate")[f"{run_id}:comp:{RESERVE}"] == 2


# -- a wall clock that steps ------------------------------------------------------------------------------


def test_an_unwinder_whose_wall_clock_jumped_past_the_lease_reads_busy_and_never_runs_a_live_holders_hook(
    shared_journal_url: str, run_id: str, stack: ExitStack, tmp_path: Path
) -> None:
    journal = stack.enter_context(open_journal(shared_journal_url, migrate=True))
    ledger = stack.enter_context(open_ledger(shared_journal_url))
    tools = order_tools(ledger)
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order_script()))
    release = tmp_path / "release"
    holder = spawn(shared_journal_url, ledger.scope, run_id, mode="hang", ttl=3, release_file=release)
    stack.callback(kill_if_alive, holder)
    wait_until(lambda: ledger.calls("entered:reserve") != [], "the holder to enter the reserve hook")

    skewed = []
    for skew in (3600.0, -3600.0):  # an hour ahead (far past SAGA_CLAIM_TTL), an hour behind
        skewed.append(result_of(spawn(shared_journal_url, ledger.scope, run_id, ttl=3, skew=skew))["report"])
    assert holder.poll() is None  # still inside its hook, holding the step
    release.touch()
    held = result_of(holder)["report"]

    assert [e["status"] for e in held["entries"]] == ["compensated"] * 3
    for report in skewed:
        assert [e["status"] for e in report["entries"]] == ["already-compensated", "busy", "not-attempted"]
    key = f"{run_id}:comp:{RESERVE}"
    assert ledger.call_counts("compensate:reserve") == {key: 1}  # the hook ran once, in the holder
    claim = journal.get_claim(run_id, RESERVE)
    assert claim is not None and claim.status is ClaimStatus.COMPENSATED and claim.attempts == 1


def test_an_unwinder_in_process_whose_wall_clock_jumped_reads_busy_on_the_memory_journal(
    run_id: str, stack: ExitStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = open_journal("memory://")
    ledger = stack.enter_context(open_ledger(journal.url))
    entered, release = threading.Event(), threading.Event()

    def slow_reserve(name: str, input: Any, output: Any, opts: CallOptions) -> None:
        if name == "reserve" and not entered.is_set():
            entered.set()
            release.wait(timeout=60)

    tools = order_tools(ledger, before_compensate=slow_reserve)
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order_script()))
    holder = threading.Thread(
        target=lambda: compensate_run(run_id, journal=journal, tools=tools, claim_ttl=3)
    )
    holder.start()
    stack.callback(holder.join, 60)
    stack.callback(release.set)
    assert entered.wait(timeout=30)

    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)  # the machine's clock steps an hour ahead
    assert statuses(compensate_run(run_id, journal=journal, tools=tools, claim_ttl=3)) == [
        "already-compensated",
        "busy",
        "not-attempted",
    ]
    assert ledger.call_counts("compensate:reserve") == {}


needs_boot_id = pytest.mark.skipif(boot_clock.boot_id() is None, reason="needs the kernel's boot id")


@needs_boot_id
def test_a_sqlite_lease_from_another_boot_is_expired_however_far_off_its_deadline(
    sqlite_url: str, run_id: str
) -> None:
    with open_journal(sqlite_url, migrate=True) as journal:
        key = f"{run_id}:comp:{RESERVE}"
        held = claim(journal, run_id, "before-reboot", ttl=3600).claim
        assert held is not None and journal.lease_left(held) > 3000
        assert not claim(journal, run_id, "same-boot").acquired  # live on this boot's clock
        set_lease_columns(journal, run_id, lease_boot_id=str(uuid.uuid4()))  # as if written before a reboot
        before_reboot = journal.get_claim(run_id, RESERVE)
        assert before_reboot is not None and journal.lease_left(before_reboot) <= 0

        after = claim(journal, run_id, "after-reboot")
        assert after.acquired and after.claim is not None
        assert (after.claim.owner, after.claim.attempts, after.claim.idempotency_key) == (
            "after-reboot",
            2,
            key,
        )


@needs_boot_id
def test_a_sqlite_lease_taken_by_the_previous_release_is_judged_by_its_wall_clock_deadline(
    sqlite_url: str, run_id: str
) -> None:
    # During a rolling upgrade the previous release takes claims too: it bumps attempts and writes
    # the wall-clock deadline only, leaving this release's boot-clock columns stale.
    with open_journal(sqlite_url, migrate=True) as journal:
        assert claim(journal, run_id, "new-release", ttl=0.5).acquired
        stale = {"lease_boot_expires_at": 0.0}  # the stale boot-clock lease lapsed long ago
        set_lease_columns(
            journal, run_id, owner="old-release", attempts=2, lease_expires_at=time.time() + 3600, **stale
        )
        assert not claim(journal, run_id, "rival").acquired  # its live wall-clock lease decides
        taken = journal.get_claim(run_id, RESERVE)
        assert taken is not None and journal.lease_left(taken) > 3000

        set_lease_columns(journal, run_id, lease_expires_at=time.time() - 1, lease_boot_expires_at=1e12)
        assert claim(journal, run_id, "rival").acquired  # and so does its lapsed one


def claim(journal: Journal, run_id: str, owner: str, ttl: float = 60) -> ClaimAttempt:
    key = f"{run_id}:comp:{RESERVE}"
    return journal.claim_compensation(
        run_id, RESERVE, via_run_id=run_id, owner=owner, ttl=ttl, idempotency_key=key
    )


def set_lease_columns(journal: Journal, run_id: str, **values: object) -> None:
    """Write a claim's row as another process (another boot, another release) would have."""
    assert isinstance(journal, SqlJournal)
    with journal.engine.begin() as conn:
        conn.execute(
            sa.update(claims)
            .where(claims.c.origin_run_id == run_id, claims.c.suffix == RESERVE)
            .values(**values)
        )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_never_renews_the_leases_of_its_parents_hooks(tmp_path: Path) -> None:
    # Celery's prefork pool forks workers: a child renewing its parent's leases would keep the claims
    # of a dead parent alive forever, and its step would never be re-driven.
    keeper = LeaseKeeper()
    renewals = tmp_path / "renewals"

    def parent_renew() -> bool:
        with renewals.open("a") as f:
            f.write(f"{os.getpid()}\n")
        return True

    with keeper.keep(parent_renew, 0.02):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "fork() in a multi-threaded process"
            pid = os.fork()
        if pid == 0:  # the child: keep a lease of its own for a while, then leave without pytest's teardown
            code = 3
            try:
                renewed = threading.Event()
                with keeper.keep(setting(renewed), 0.02):
                    code = 0 if renewed.wait(timeout=10) else 2
                    time.sleep(0.2)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        time.sleep(0.1)

    assert os.waitstatus_to_exitcode(status) == 0
    renewers = set(renewals.read_text().split())
    assert str(os.getpid()) in renewers
    assert str(pid) not in renewers


def test_holding_a_lease_of_a_known_interval_does_not_wake_the_keeper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every compensated step holds a lease while its hook runs. Waking the keeper's thread for each one
    # hands the GIL to it and back (issue 26: a third of an in-process SQLite unwind under load), though
    # a lease is never due before ``interval`` has passed.
    keeper = LeaseKeeper()
    notified = 0
    notify = keeper._cond.notify

    def counting(n: int = 1) -> None:
        nonlocal notified
        notified += 1
        notify(n)

    monkeypatch.setattr(keeper._cond, "notify", counting)
    for _ in range(50):
        with keeper.keep(lambda: True, 10.0):
            pass
        time.sleep(0.002)  # the keeper's thread gets to look at its (now empty) table between steps
    assert notified == 0

    # A lease that must be renewed sooner than the thread plans to look still wakes it in time.
    renewed = threading.Event()
    with keeper.keep(setting(renewed), 0.02):
        assert renewed.wait(timeout=2)
    assert notified == 1


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the death, on purpose
def test_a_keeper_whose_thread_died_starts_another_for_the_next_lease() -> None:
    keeper = LeaseKeeper()

    def dies() -> bool:
        raise SystemExit  # not an Exception: it ends the keeper's thread, as nothing else would

    with keeper.keep(dies, 0.01):
        thread = keeper._thread
        assert thread is not None
        thread.join(timeout=5)
    assert not thread.is_alive()
    renewed = threading.Event()
    with keeper.keep(setting(renewed), 0.02):
        assert renewed.wait(timeout=2)


# -- the Redis lock is the fast path, the journal claim the truth ----------------------------------------


@pytest.fixture(params=["memory", "redis"])
def step_lock(request: pytest.FixtureRequest) -> Iterator[StepLock]:
    if request.param == "memory":
        yield MemoryStepLock()
        return
    lock = RedisStepLock.from_url(
        request.getfixturevalue("redis_url"), prefix=f"saga:test:{uuid.uuid4().hex}:"
    )
    yield lock
    lock.client.close()


def test_step_whose_lock_another_unwinder_holds_reads_busy_without_touching_the_journal(
    journal: Journal, run_id: str, step_lock: StepLock, stack: ExitStack
) -> None:
    ledger = stack.enter_context(open_ledger(journal.url))
    tools = order_tools(ledger)
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order_script()))
    assert step_lock.acquire(f"{run_id}:comp:{RESERVE}", "elsewhere:1:abc", 60)

    report = compensate_run(run_id, journal=journal, tools=tools, lock=step_lock)

    assert statuses(report) == ["compensated", "busy", "not-attempted"]
    assert journal.get_claim(run_id, RESERVE) is None
    assert ledger.call_counts("compensate") == {f"{run_id}:comp:call-3": 1}


def test_free_lock_does_not_override_a_live_journal_claim(
    journal: Journal, run_id: str, step_lock: StepLock, stack: ExitStack
) -> None:
    # The lock of a live holder expired (or Redis lost it): the journal's claim still says busy.
    ledger = stack.enter_context(open_ledger(journal.url))
    tools = order_tools(ledger)
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order_script()))
    held = journal.claim_compensation(
        run_id,
        RESERVE,
        via_run_id=run_id,
        owner="elsewhere:1:abc",
        ttl=600,
        idempotency_key=f"{run_id}:comp:{RESERVE}",
    )

    report = compensate_run(run_id, journal=journal, tools=tools, lock=step_lock)

    assert statuses(report) == ["compensated", "busy", "not-attempted"]
    assert journal.get_claim(run_id, RESERVE) == held.claim
    assert step_lock.acquire(f"{run_id}:comp:{RESERVE}", "someone-else", 1)  # the busy caller released it
    assert ledger.call_counts("compensate") == {f"{run_id}:comp:call-3": 1}
