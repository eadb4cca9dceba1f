"""A hypothesis state machine over condemn, deliver, duplicate, crash at a point, expire a lease and
sweep, with the checker's invariants after every rule: no double effect, no effect after the
tombstone, every report true; and, once everything is swept, no lost compensation.

In-process on the memory journal with a clock the machine moves (leases expire when it says so),
against an in-memory ledger; a crash is ``InjectedCrash`` raised at a fault point, which unwinds
the stack the way a dying process would (no outcome is written, no lease is released)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from saga_worker import CompensatedRunError, MemoryJournal, ToolCall, compensate_run, run_durable, scripted
from saga_worker.core import faults
from tests.reads import run_of

from .checker import check
from .ledger import MemLedger
from .toolkit import make_tools

TTL = 5.0
POINTS = ["after_claim", "before_hook", "mid_hook", "after_hook", "after_outcome"]


class Clock:
    """Wall time the machine controls; every read moves it a microsecond so events stay ordered."""

    def __init__(self) -> None:
        self.t = 1_000_000.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.t += 1e-6
            return self.t


class ClockJournal(MemoryJournal):
    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    def now(self) -> float:
        return self.clock()

    def lease_clock(self) -> float:
        return self.clock()


class UnwindMachine(RuleBasedStateMachine):
    runs = Bundle("runs")

    @initialize()
    def setup(self) -> None:
        faults.configure()
        self.clock = Clock()
        self.journal = ClockJournal(self.clock)
        self.ledger = MemLedger(self.clock)
        self.tools = make_tools(lambda: self.ledger)
        self.count = 0
        self.crashes = 0

    def _unwind(self, run_id: str) -> None:
        try:
            report = compensate_run(run_id, journal=self.journal, tools=self.tools, claim_ttl=TTL)
        except faults.InjectedCrash:
            self.crashes += 1
            return
        self.ledger.add_report(run_id, report.model_dump(mode="json"))

    @rule(target=runs, steps=st.integers(1, 3), comp_fail=st.integers(0, 1), crash_mid_execute=st.booleans())
    def start(self, steps: int, comp_fail: int, crash_mid_execute: bool) -> str:
        self.count += 1
        run_id = f"run-{self.count}"
        calls = [ToolCall("pay", {"n": i, "comp_fail": comp_fail}) for i in range(1, steps + 1)]
        if crash_mid_execute:  # the run's process dies inside its last call: its record stays running
            faults.configure(f"mid_execute=crash@{run_id}:call-{steps}*1")
        try:
            run_durable(run_id, journal=self.journal, tools=self.tools, planner=scripted(*calls))
        except faults.InjectedCrash:
            pass
        finally:
            faults.configure()
        return run_id

    @rule(run_id=runs)
    def condemn(self, run_id: str) -> None:
        self._unwind(run_id)

    @rule(run_id=runs)
    def deliver(self, run_id: str) -> None:
        """A redelivered (or second) compensate_run for the run."""
        if run_of(self.journal, run_id).condemned:
            self._unwind(run_id)

    @rule(run_id=runs)
    def duplicate(self, run_id: str) -> None:
        """The same request delivered twice at once: two unwinders race on one run."""
        threads = [threading.Thread(target=self._unwind, args=(run_id,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    @rule(run_id=runs, point=st.sampled_from(POINTS))
    def crash_at_point(self, run_id: str, point: str) -> None:
        faults.configure(f"{point}=crash@{run_id}:*1")
        try:
            self._unwind(run_id)
        finally:
            faults.configure()

    @rule(run_id=runs)
    def resume_condemned(self, run_id: str) -> None:
        """A condemned run asked to go on must refuse, executing nothing."""
        if not run_of(self.journal, run_id).condemned:
            return
        before = len(self.ledger.calls("execute"))
        with pytest.raises(CompensatedRunError):
            run_durable(
                run_id,
                journal=self.journal,
                tools=self.tools,
                planner=scripted(ToolCall("pay", {"n": 99}, id="late")),
            )
        assert len(self.ledger.calls("execute")) == before

    @rule()
    def expire_leases(self) -> None:
        self.clock.t += TTL + 1

    @rule()
    def sweep(self) -> None:
        for run in self.journal.runs_to_sweep(self.journal.now()):
            self._unwind(run.run_id)

    @invariant()
    def promises_hold(self) -> None:
        if not hasattr(self, "journal"):
            return
        verdict = check(self.ledger, self.journal, settled=False)
        assert not verdict.double and not verdict.after_tombstone and not verdict.mismatches, (
            verdict.summary()
        )

    def teardown(self) -> None:
        if not hasattr(self, "journal"):
            return
        for _ in range(20):  # let leases lapse and the sweeper finish every unwind
            self.clock.t += TTL + 1
            due = self.journal.runs_to_sweep(self.journal.now())
            if not due:
                break
            for run in due:
                self._unwind(run.run_id)
        verdict = check(self.ledger, self.journal, settled=True)
        assert verdict.clean, verdict.summary()
        faults.configure()


UnwindMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_unwinds_keep_every_promise_under_any_interleaving_of_faults = UnwindMachine.TestCase


def test_the_state_machine_bites_when_the_compensation_key_is_unstable(monkeypatch: Any) -> None:
    from . import breaks

    breaks.apply("unstable-key", monkeypatch.setattr)
    machine = UnwindMachine()
    machine.setup()
    run_id = machine.start(steps=2, comp_fail=0, crash_mid_execute=False)
    machine.crash_at_point(run_id, "after_hook")
    machine.expire_leases()
    machine.sweep()
    with pytest.raises(AssertionError, match="undone under keys"):
        machine.promises_hold()
