"""One attempt at undoing one step: every per-step rule of docs/reference/compensation.md ("Each step", the first that applies
decides) and the verdict the report shows, in one place.

The in-process engine and the Celery executor both ask ``StepAttempt(...).verdict()``. The executor's
step tasks pass ``Twins``: the deliveries of one step message (a redelivery, a duplicate) share a
token, so an attempt can tell a claim of its own step from a stranger's. That decides three things
here too: a live twin holding the step makes this delivery stand down (``None``), a busy claim held
by a twin is that twin's to finish, and a step a twin already undid is this unwind's compensation.

The verdict's rules are all here; three helpers it asks live beside it: ``twins.Twins`` (who else
holds the step), ``recovery.what_happened`` (rule 2: what the call did, ``recover`` asked) and
``entries.entry_for`` (the entry as it is written).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core import faults
from ..core.frozen import quick
from ..core.keys import compensate_key
from ..core.leases import keeper, new_owner
from ..core.storable import exception_text
from ..journal.records import (
    ClaimAttempt,
    ClaimStatus,
    CompensationClaim,
    FinishedClaim,
    GateDecision,
    RecordStatus,
    ToolRecord,
    UnwindEnd,
    UnwindState,
)
from ..journal.roles import UnwindJournal
from ..locks.base import StepLock
from ..observing import metrics, tracing
from ..recording.tools import CallOptions, Tool, call_hook
from . import alerts
from .carry import LEASE_LOST, HeldOutcome, OutcomeCarry
from .entries import entry_for
from .hookcall import HookCall
from .recovery import Settled, what_happened
from .report import CompensationEntry, CompensationStatus
from .twins import Twins

log = logging.getLogger(__name__)
S = CompensationStatus


def _out_of_time(exc: BaseException) -> bool:
    """Is this Celery's SoftTimeLimitExceeded (a worker's time limit, raised into the task's thread)?"""
    return type(exc).__name__ == "SoftTimeLimitExceeded" and type(exc).__module__.startswith(
        ("celery", "billiard")
    )


def _timed_out(timeout: float | None, call: HookCall, attempt: int, attempts: int) -> str:
    why = (
        f"compensate hook timed out after {timeout:g}s"
        if call.interrupted is None
        else f"compensate hook interrupted by {type(call.interrupted).__name__} while it runs"
    )
    return (
        f"{why} (attempt {attempt} of {attempts}); it may still land, so the step stays claimed until "
        "the hook returns (its outcome is then recorded) or its process ends (the claim then lapses "
        "and a later unwind retries with the same key)"
    )


def _what_the_claim_tells(claim: CompensationClaim | None, key: str) -> str:
    """What is known of a refused step's earlier deliveries, from its claim as this one found it: a
    claim is taken just before each call of the hook, and its outcome written when the call ends."""
    if claim is None or claim.attempts == 0:
        started = "its compensate hook was never started"
    else:
        times = "once" if claim.attempts == 1 else f"{claim.attempts} times"
        started = f"its compensate hook was started {times} (the step's claims, across unwinds)"
        if claim.status is ClaimStatus.CLAIMED:
            started += " and its outcome was never recorded: it may have taken effect"
        elif claim.error:
            started += f"; the last outcome recorded is a failure: {claim.error}"
    return (
        f"{started}; none of the tool's code was called this time, and a re-drive calls the hook "
        f"again with the same key {key!r}"
    )


@quick
@dataclass(frozen=True)
class Unwinding:
    """What every step of one unwind shares."""

    journal: UnwindJournal
    run_id: str
    tools: Mapping[str, Tool]
    ttl: float
    dry_run: bool = False
    lock: StepLock | None = None
    # How an entry names the tools the unwinder has, when a step's tool is not among them.
    tools_named: str = "the tools given"
    # The in-process unwind's: a step's outcome written with the next step's claim (``carry.py``).
    carry: OutcomeCarry | None = None
    # Each step's group number (``groups.group_numbers`` of the run's records), when known before the
    # steps: an entry is then made with it, rather than copied with it by the report (``numbered``).
    groups: Mapping[tuple[str, str], int] | None = None


def lock_op(op: Callable[..., Any], *args: Any) -> Any:
    """A lock operation that cannot fail the unwind: with Redis down, the journal claim alone decides
    (it is the truth anyway), so an unreachable lock reads as taken-by-us, not as busy."""
    try:
        return op(*args)
    except Exception:
        log.warning("step lock unavailable; relying on the journal claim alone", exc_info=True)
        return True


@quick
@dataclass(frozen=True)
class Pretaken:
    """The step's claim, taken before the attempt began (with the step's read: ``stepread``), and
    whether the step lock is held with it (taken before that read, under the twins' token)."""

    claim: CompensationClaim
    locked: bool


class StepAttempt:
    """One attempt at one step of an unwind; ``verdict()`` applies the rules once.

    ``claims``, when given, holds the step's claim as read with the whole worklist at once."""

    def __init__(
        self,
        unwinding: Unwinding,
        record: ToolRecord,
        *,
        claims: Mapping[tuple[str, str], CompensationClaim] | None = None,
        twins: Twins | None = None,
        refusal: str | None = None,
        pretaken: Pretaken | None = None,
        end_with: Callable[[CompensationEntry], UnwindEnd | None] | None = None,
    ) -> None:
        self.unwinding = unwinding
        # The last step of a distributed unwind: given the step's entry had its outcome been written,
        # the unwind's end to write in the same commit (None: none; ``Journal.finish_step``).
        self.end_with = end_with
        self.ended = False  # that end was written with the outcome
        # The step's claim, taken with its read (its lock too, if ``locked``): the attempt's own
        # claim when it gets there (``_claim``), so no other attempt can hold it meanwhile.
        self.pretaken = pretaken
        # Why none of the tool's code may run for this step (its workers were lost too often): the
        # step is then failed under its claim, its hooks (recover, the gate, compensate) not called.
        self.refusal = refusal
        self.record = record
        self.claims = claims
        self.twins = twins
        self.owner = ""  # the journal claim's owner, made when the step gets that far
        self.lock_owner = ""
        # The step's claim key, (origin run, suffix): the record read again (``what_happened``) is
        # the same step's, so it is fixed for the attempt, as ``key`` is.
        self._where = (record.origin_run_id, record.suffix)
        self.key = compensate_key(record.origin_run_id, record.suffix)
        self.attempts = 0  # of the step's claim, as this attempt found it
        self.gated = False  # a person must approve this compensation (every entry says so, once known)
        # The unwind entry stored with the claim's outcome (``Twins.entry_at``), an earlier delivery's
        # if one was there first; None when this attempt wrote no outcome, or has nowhere to store one.
        self.stored: dict[str, Any] | None = None

    def verdict(self) -> CompensationEntry | None:
        """The step's entry; None when a live twin delivery holds the step (it carries the chain on,
        and this delivery must end without writing anything)."""
        span = tracing.compensate(
            self.unwinding.run_id, self.record, self.key, dry_run=self.unwinding.dry_run
        )
        if span is tracing.NO_SPAN:  # not traced: nothing to make current, nothing to tell it
            return self._verdict()
        with span:
            entry = self._verdict()
            span.verdict(entry)
            return entry

    def _verdict(self) -> CompensationEntry | None:
        twins, u = self.twins, self.unwinding
        if twins is not None and not u.dry_run:
            first = None if self.claims is None else self.claims.get(self._where)
            if twins.live_holder(u.journal, self.record, first, u.ttl):
                return None
        entry = self._decide()
        if not u.dry_run:
            metrics.inc(metrics.STEPS, entry.status._value_)  # (``.value`` is a descriptor: two calls)
            alerts.step_halted(u.run_id, entry)
        return entry if twins is None else self._as_twins_see_it(entry, twins)

    def _entry(
        self, status: CompensationStatus, error: str | None = None, *, needs_approval: bool = False
    ) -> CompensationEntry:
        gated = needs_approval or self.gated
        groups = self.unwinding.groups
        group = 0 if groups is None else groups.get(self._where, 0)
        return entry_for(
            self.record, status, error, self.attempts, needs_approval=gated, group=group, key=self.key
        )

    def _as_twins_see_it(self, entry: CompensationEntry, twins: Twins) -> CompensationEntry | None:
        if entry.status is S.BUSY:
            claim = self.unwinding.journal.get_claim(*self._where)
            if claim is not None and claim.status is ClaimStatus.CLAIMED and twins.owns(claim.owner):
                return None  # another delivery of this very step won the claim: it carries the chain on
        if entry.status is S.ALREADY_COMPENSATED:
            claim = self.unwinding.journal.get_claim(*self._where)
            if claim is not None and twins.owns(claim.owner):
                # Undone by this very unwind (an attempt that died after writing its outcome): it is
                # this unwind's compensation, not an earlier one's.
                return entry.model_copy(update={"status": S.COMPENSATED})
        return entry

    def _decide(self) -> CompensationEntry:
        # 1. Done before (by this run or a fork sharing the effect): no probe, no hook lookup.
        claim = self._claim_as_known()
        if claim is not None and claim.status is ClaimStatus.COMPENSATED:
            return entry_for(self.record, S.ALREADY_COMPENSATED, attempts=claim.attempts)
        self.attempts = claim.attempts if claim is not None else 0
        # 1b. The processes running this step kept dying: call none of its tool's code again.
        if self.refusal is not None:
            return self._refused(f"{self.refusal}; {_what_the_claim_tells(claim, self.key)}")
        # 2. What happened: an interrupted or failed call may or may not have had its effect.
        u = self.unwinding
        tool = u.tools.get(self.record.tool_name)
        if u.carry is not None and not self._straight_to_claim(tool):
            # The previous step's outcome first, on its own: this step calls the app's code before any
            # claim (recover, an approval rule), or takes none.
            u.carry.flush()
            if u.carry.lost is not None:
                return entry_for(self.record, S.NOT_ATTEMPTED)
        self.record, happened = what_happened(u.journal, u.run_id, self.record, tool)
        if isinstance(happened, Settled):
            return self._entry(happened.status, happened.error)
        # 3. Nothing to call. A tool missing altogether says so: the step is skipped, but nothing was
        # undone, and the unwind stays out of complete until the tool is deployed and it is re-driven.
        if tool is None:
            return self._missing_tool()
        if tool.compensate is None:
            return self._entry(S.SKIPPED_NO_HOOK)
        # 3b. A person must approve this compensation (a dry run shows the gate).
        self.gated = gated = tool.compensation_needs_approval(self.record.input, happened.output)
        if gated:
            decided = self._gate_verdict()
            if decided is not None:
                return decided
        # 4. A plan only: nothing written, nothing called, never stops.
        if self.unwinding.dry_run:
            return self._entry(S.WOULD_COMPENSATE, needs_approval=gated)
        # 5./6. Claim, then call the hook under a lease kept alive while it runs.
        entry = self._claim_and_undo(tool, happened.output, claim)
        return entry.model_copy(update={"needs_approval": True}) if gated else entry

    def _straight_to_claim(self, tool: Tool | None) -> bool:
        """Does this step go from here to its claim with no code of the app's called and nothing
        written (a succeeded call, a compensate hook, no approval rule to ask)?"""
        return (
            self.record.status is RecordStatus.SUCCEEDED
            and tool is not None
            and tool.compensate is not None
            and tool.compensate_needs_approval is False
            and not self.unwinding.dry_run
        )

    def _claim(self) -> ClaimAttempt | None:
        """Claim the step (with the previous step's outcome, when one is carried); None when that
        outcome turned out not written (nothing claimed)."""
        u = self.unwinding
        pretaken, self.pretaken = self.pretaken, None
        if pretaken is not None and (pretaken.claim.origin_run_id, pretaken.claim.suffix) == self._where:
            return ClaimAttempt(True, pretaken.claim)
        if u.carry is not None:
            return u.carry.claim(
                *self._where, via_run_id=u.run_id, owner=self.owner, ttl=u.ttl, idempotency_key=self.key
            )
        return u.journal.claim_compensation(
            *self._where, via_run_id=u.run_id, owner=self.owner, ttl=u.ttl, idempotency_key=self.key
        )

    def _missing_tool(self) -> CompensationEntry:
        names = sorted(self.unwinding.tools)
        known = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "") or "none"
        error = (
            f"no tool named {self.record.tool_name!r} in {self.unwinding.tools_named} (it has: {known}); nothing "
            "was undone: the unwind is flagged for a person; deploy the tool, then re-drive the run"
        )
        return self._entry(S.SKIPPED_NO_HOOK, error).model_copy(update={"tool_missing": True})

    def _claim_as_known(self) -> CompensationClaim | None:
        # A claim read with the worklist may be stale, which is harmless for a succeeded record: the
        # claim's compare-and-set is the truth. A record that would be probed reads it afresh.
        if self.claims is not None and self.record.status is RecordStatus.SUCCEEDED:
            return self.claims.get(self._where)
        return self.unwinding.journal.get_claim(*self._where)

    def _gate_verdict(self) -> CompensationEntry | None:
        """A denial skips the step, no decision yet halts here (read afresh: a decision may have come
        since the worklist was read); None when it is approved, or for a dry run's plan."""
        gate = self.unwinding.journal.get_gates([self._where]).get(self._where)
        if gate is not None and gate.decision is GateDecision.DENIED:
            why = f"compensation denied by {gate.actor}" + (f": {gate.reason}" if gate.reason else "")
            return self._entry(S.SKIPPED_DENIED, why, needs_approval=True)
        if gate is None and not self.unwinding.dry_run:
            return self._entry(
                S.AWAITING_APPROVAL,
                f"waits for approve_compensation(run {self.unwinding.run_id!r}, step {self.record.suffix!r})",
                needs_approval=True,
            )
        return None

    def _refused(self, why: str) -> CompensationEntry:
        """The step failed without a call to its tool (``refusal``): the claim taken, as for a hook,
        so its outcome is written by the one holder, and released as failed (a person's re-drive
        claims it again with the same key)."""
        if self.unwinding.dry_run:
            return self._entry(S.FAILED, why).model_copy(update={"worker_lost": True})

        def fail() -> CompensationEntry:
            failed = self._entry(S.FAILED, why).model_copy(update={"worker_lost": True})
            self._finish(ClaimStatus.FAILED, failed, why)
            return failed

        return self._holding(self._claim_as_known(), fail)

    def _claim_and_undo(self, tool: Tool, output: Any, before: CompensationClaim | None) -> CompensationEntry:
        return self._holding(before, lambda: self._run_hook(tool, output))

    def _holding(
        self, before: CompensationClaim | None, then: Callable[[], CompensationEntry]
    ) -> CompensationEntry:
        """Take the step's lock and claim, then ``then()`` while holding them (the entry it gives),
        or the entry that says why the step could not be taken (busy, already compensated)."""
        u, record, key = self.unwinding, self.record, self.key
        self.owner = self.twins.new_owner() if self.twins is not None else new_owner()
        self.lock_owner = self.twins.token if self.twins is not None else self.owner
        locked = self.pretaken is not None and self.pretaken.locked
        if u.lock is not None and not locked and not lock_op(u.lock.acquire, key, self.lock_owner, u.ttl):
            return self._entry(S.BUSY, "another unwinder holds this step's lock")
        try:
            attempt = self._claim()
            if attempt is None:  # the previous step's outcome was not written: the unwind halts there
                return entry_for(record, S.NOT_ATTEMPTED)
            held = attempt.claim
            if not attempt.acquired:
                if held is not None and held.status is ClaimStatus.COMPENSATED:
                    return entry_for(record, S.ALREADY_COMPENSATED, attempts=held.attempts)
                holder = held.owner if held is not None else "?"
                attempts = held.attempts if held is not None else self.attempts
                return entry_for(record, S.BUSY, f"step is being compensated by {holder}", attempts)
            assert held is not None
            self.owner = held.owner  # this attempt's, or the one the tombstone's commit claimed it under
            if before is not None and before.status is ClaimStatus.CLAIMED and before.owner != self.owner:
                metrics.inc(
                    metrics.CLAIM_TAKEOVERS
                )  # a holder whose lease ran out: this attempt re-drives its step
            faults.point("after_claim", key)
            self.attempts = held.attempts
            return then()
        finally:
            if u.lock is not None:
                lock_op(u.lock.release, key, self.lock_owner)

    def _renew(self) -> bool:
        u = self.unwinding
        if u.lock is not None:
            lock_op(u.lock.extend, self.key, self.lock_owner, u.ttl)
        return u.journal.renew_claim(*self._where, self.owner, u.ttl)

    def _run_hook(self, tool: Tool, output: Any) -> CompensationEntry:
        """Call the hook under the tool's policy (docs/reference/tools-and-runs.md): up to ``compensate_retry.attempts``
        calls, each within ``compensate_timeout``, all with the same key, the claim held throughout.

        A hook that raises is called again after the policy's backoff (the claim taken back by its
        own owner, which counts the attempt). A hook that times out is not: it may still be running,
        and a second call would undo the step twice at once. Its step reads failed, and its claim stays
        held, renewed, until the hook's thread ends (its outcome is then written) or the process dies
        (the lease lapses, and a later unwind re-drives the step with the same key)."""
        assert tool.compensate is not None
        u, record, key = self.unwinding, self.record, self.key
        opts = CallOptions(key, record.tool_call_id, u.run_id)
        policy, timeout = tool.compensate_retry, tool.compensate_timeout
        stop_renewing = keeper.hold(self._renew, u.ttl / 3)
        handed_over = False  # the renewals now belong to a timed-out hook's thread
        try:
            attempt = 1
            while True:
                started = time.perf_counter()
                try:
                    faults.point("before_hook", key)
                    pending = self._call(tool.compensate, (record.input, output, opts), timeout)
                    if pending is not None:
                        metrics.observe(
                            metrics.HOOK_SECONDS, time.perf_counter() - started, record.tool_name, "timed-out"
                        )
                        handed_over = True
                        pending.when_done(lambda call: self._late_outcome(call, stop_renewing))
                        if pending.interrupted is not None and not isinstance(pending.interrupted, Exception):
                            raise pending.interrupted  # Ctrl-C, SystemExit: the claim stays with the hook
                        return self._entry(S.FAILED, _timed_out(timeout, pending, attempt, policy.attempts))
                    metrics.observe(
                        metrics.HOOK_SECONDS, time.perf_counter() - started, record.tool_name, "returned"
                    )
                    faults.point("after_hook", key)
                    break
                except Exception as exc:
                    metrics.observe(
                        metrics.HOOK_SECONDS, time.perf_counter() - started, record.tool_name, "raised"
                    )
                    error = exception_text(exc)  # storable: the claim must be released, whatever the text
                    # A worker's soft time limit raised in the hook: the task is out of time, so no retry.
                    # The hook's own frames unwound, so it can no longer land: its claim is released.
                    if attempt < policy.attempts and not _out_of_time(exc):
                        lost = self._take_back(policy.delay(attempt))
                        if lost is not None:
                            return lost
                        attempt += 1
                        continue
                    if policy.attempts > 1:
                        error = f"{error} (attempt {attempt} of {policy.attempts})"
                    failed = self._entry(S.FAILED, error)
                    self._finish(ClaimStatus.FAILED, failed, error)  # failed whether or not it is written
                    return failed
        finally:
            if not handed_over:
                stop_renewing()
        return self._compensated()

    def _compensated(self) -> CompensationEntry:
        """The hook returned: its outcome written, unless our lease lapsed and another unwinder took
        the step. The step is then that unwinder's: its outcome stands and is its to report, so this
        attempt reads busy (the unwind halts, and a later one reads what the owner wrote). Two holders
        of one step never both report it compensated."""
        done = self._entry(S.COMPENSATED)
        carry = self.unwinding.carry
        if carry is not None:  # written with the next step's claim, or on its own before the report
            finished = FinishedClaim(*self._where, self.owner, ClaimStatus.COMPENSATED)
            carry.hold(HeldOutcome(finished, self.key, done))
            return done
        lost = self._entry(S.BUSY, LEASE_LOST)
        written = self._finish(ClaimStatus.COMPENSATED, done, lost=lost)
        faults.point("after_outcome", self.key)
        return done if written else lost

    @staticmethod
    def _call(hook: Any, args: tuple[Any, ...], timeout: float | None) -> HookCall | None:
        """Call the hook: here without a timeout (as ever), on its own thread with one. None once it
        has returned (its exception raised); the still-running call when the timeout passed first."""
        if timeout is None:
            call_hook(hook, *args)
            return None
        call = HookCall(hook, args)
        if not call.wait(timeout):
            return call
        call.result()
        return None

    def _take_back(self, delay: float) -> CompensationEntry | None:
        """Wait out the backoff, still holding the step (the keeper renews it), then take the claim
        back as its own owner: the journal counts the attempt. The entry that ends the step here if
        the claim was lost meanwhile (a lease that could not be renewed), else None."""
        if delay > 0:
            (self.twins.sleep if self.twins is not None else time.sleep)(delay)
        u = self.unwinding
        taken = u.journal.claim_compensation(
            *self._where, via_run_id=u.run_id, owner=self.owner, ttl=u.ttl, idempotency_key=self.key
        )
        held = taken.claim
        if not taken.acquired:
            if held is not None and held.status is ClaimStatus.COMPENSATED:
                return entry_for(self.record, S.ALREADY_COMPENSATED, attempts=held.attempts)
            holder = held.owner if held is not None else "?"
            attempts = held.attempts if held is not None else self.attempts
            return entry_for(self.record, S.BUSY, f"step is being compensated by {holder}", attempts)
        assert held is not None
        self.attempts = held.attempts
        return None

    def _late_outcome(self, call: HookCall, stop_renewing: Callable[[], None]) -> None:
        """A timed-out hook has ended after all: write what it did as the claim's outcome (only while
        this attempt still owns the claim), then stop renewing. From now on it can no longer land."""
        status = ClaimStatus.COMPENSATED if call.error is None else ClaimStatus.FAILED
        error = None if call.error is None else f"after its timeout: {exception_text(call.error)}"
        journal = self.unwinding.journal
        try:
            written = journal.finish_claim(*self._where, self.owner, status, error)
            if written:
                # The unwind halted at this step: the steps after it still wait, and a sweeper that gave
                # up on a step that read busy must come back now (as an execute outcome landing late does).
                ended = "returned" if call.error is None else "raised"
                journal.set_unwind_state(
                    self.unwinding.run_id,
                    UnwindState.PENDING,
                    note=f"{self.record.suffix}: its compensate hook {ended} after its timeout",
                    next_at=journal.now(),
                )
            log.warning(
                "compensate hook of step %s ended after its timeout (%s); outcome %s",
                self.key,
                "returned" if call.error is None else "raised",
                "written" if written else "not written (the claim moved on)",
            )
        except Exception:  # the lease lapses once renewals stop, and a later unwind re-drives the step
            log.warning("could not write the late outcome of step %s", self.key, exc_info=True)
        finally:
            stop_renewing()

    def _finish(
        self,
        status: ClaimStatus,
        entry: CompensationEntry,
        error: str | None = None,
        *,
        lost: CompensationEntry | None = None,
    ) -> bool:
        """Write the claim's outcome while still its owner; whether it was written.

        For a step of a distributed unwind, its unwind entry too, in the same commit: ``entry`` if the
        outcome was written, else ``lost`` (when given; ``entry`` otherwise)."""
        journal, at = self.unwinding.journal, None if self.twins is None else self.twins.entry_at
        if at is None:
            return journal.finish_claim(*self._where, self.owner, status, error)
        won = entry.model_dump(mode="json")
        end = None
        if self.end_with is not None and status is ClaimStatus.COMPENSATED:
            end = self.end_with(entry)
        finish = journal.finish_step(
            *self._where,
            self.owner,
            status,
            error,
            unwind_id=at[0],
            position=at[1],
            won=won,
            lost=won if lost is None else lost.model_dump(mode="json"),
            end=end,
        )
        self.stored = finish.entry
        self.ended = finish.ended
        return finish.written
