"""The compensation engine (DESIGN.md §3): condemn first, then each step in reverse execution order.

The in-process ``compensate_run`` and the Celery tasks share these functions: ``begin_unwind`` writes
the tombstone and reads the worklist, ``compensate_step`` applies the rules to one step, and
``finish_unwind`` records whether the unwind is complete, for the sweeper.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import faults, metrics
from ..audit import check_actor, check_reason, check_via, condemned_by, default_actor
from ..errors import MalformedRecordError, SagaError
from ..journal.base import Journal
from ..journal.records import (
    AuditAction,
    AuditVia,
    ClaimStatus,
    CompensationClaim,
    GateDecision,
    NewAudit,
    RecordStatus,
    ToolRecord,
    UnwindState,
    WorklistView,
)
from ..keys import check_dry_run, check_run_id, compensate_key, execute_key
from ..locks.base import StepLock
from ..settings import get_settings
from ..storable import exception_text
from ..tools import CallOptions, RecoverResult, Tool, call_hook, check_tools
from .leases import keeper
from .report import HALTING, CompensationEntry, CompensationReport, CompensationStatus

log = logging.getLogger(__name__)
UNWOUND = (RecordStatus.SUCCEEDED, RecordStatus.FAILED, RecordStatus.RUNNING)
_HOST = socket.gethostname()[:40]
_OWNER_NONCE = uuid.uuid4().hex[:6]  # with the pid, tells this process from an earlier one of the same pid
_owner_counter = itertools.count(1)


def new_owner(tag: str = "") -> str:
    """An owner token, unique per attempt, that also tells a person where the holder ran.

    A counter rather than a fresh uuid per attempt: this is on every step's path."""
    return f"{_HOST}:{os.getpid()}:{tag or f'{_OWNER_NONCE}{next(_owner_counter)}'}"[:100]


def begin_unwind(
    journal: Journal, run_id: str, *, dry_run: bool, audit: NewAudit | None = None
) -> WorklistView:
    """Write the tombstone (unless a dry run), then read the run, the steps to undo (in execution
    order) and their claims, in one read.

    The tombstone comes first so that no new side effect can start once the worklist is read. A
    malformed run or record row fails here, before any hook runs, not after them. So does a
    ``dry_run`` that is not a real boolean: it fails before the tombstone. ``audit`` (the
    ``condemned`` row) is written with the tombstone, by the call that writes it.

    A row the journal cannot parse (MalformedRecordError) ends the unwind before any step: the
    tombstone stands, no step is reported done, and the run's unwind stays pending with the error as
    its note (``saga-worker runs`` shows it; the sweeper retries with backoff, then flags a person)."""
    if not check_dry_run(dry_run):
        journal.condemn(run_id, audit=audit)
        metrics.UNWINDS_STARTED.inc()
    try:
        return journal.read_worklist(run_id, UNWOUND)
    except MalformedRecordError as exc:
        if not dry_run:
            with contextlib.suppress(SagaError):  # the error itself is what the caller must see
                journal.hold_sweep(run_id, 0.0, f"cannot unwind: {exc}"[:2000])
        raise


def condemn_audit(run_id: str, actor: str, reason: str, via: AuditVia) -> NewAudit:
    return NewAudit(run_id, AuditAction.CONDEMNED, actor, via, reason)


def entry_for(
    record: ToolRecord,
    status: CompensationStatus,
    error: str | None = None,
    attempts: int = 0,
    *,
    needs_approval: bool = False,
) -> CompensationEntry:
    return CompensationEntry(
        needs_approval=needs_approval,
        suffix=record.suffix,
        tool_call_id=record.tool_call_id,
        tool_name=record.tool_name,
        status=status,
        error=error,
        record_status=record.status.value,
        origin_run_id=record.origin_run_id,
        attempts=attempts,
        idempotency_key=compensate_key(record.origin_run_id, record.suffix),
    )


def compensate_step(
    journal: Journal,
    run_id: str,
    record: ToolRecord,
    tools: Mapping[str, Tool],
    *,
    dry_run: bool = False,
    claim_ttl: float | None = None,
    lock: StepLock | None = None,
    owner: str | None = None,
    lock_owner: str | None = None,
    claims: Mapping[tuple[str, str], CompensationClaim] | None = None,
) -> CompensationEntry:
    """Apply DESIGN.md §3 rule 3 to one step: the first rule that applies decides.

    ``claims``, when given, holds the step's claim as read for the whole worklist at once.
    ``lock_owner`` (default: ``owner``) is the token of the fast-path lock: the executor shares it
    between deliveries of one step, while each delivery claims the journal under its own owner."""
    entry = _decide_step(
        journal,
        run_id,
        record,
        tools,
        dry_run=dry_run,
        claim_ttl=claim_ttl,
        lock=lock,
        owner=owner,
        lock_owner=lock_owner,
        claims=claims,
    )
    if not dry_run:
        metrics.STEPS.labels(entry.status.value).inc()
    return entry


def _decide_step(
    journal: Journal,
    run_id: str,
    record: ToolRecord,
    tools: Mapping[str, Tool],
    *,
    dry_run: bool,
    claim_ttl: float | None,
    lock: StepLock | None,
    owner: str | None,
    lock_owner: str | None,
    claims: Mapping[tuple[str, str], CompensationClaim] | None,
) -> CompensationEntry:
    ttl = claim_ttl if claim_ttl is not None else get_settings().claim_ttl
    key = compensate_key(record.origin_run_id, record.suffix)

    # 1. Done before (by this run or a fork sharing the effect): no probe, no hook lookup.
    # A claim read with the worklist may be stale, which is harmless for a succeeded record: the
    # claim's compare-and-set below is the truth. A record that would be probed reads it afresh.
    if claims is not None and record.status is RecordStatus.SUCCEEDED:
        claim = claims.get((record.origin_run_id, record.suffix))
    else:
        claim = journal.get_claim(record.origin_run_id, record.suffix)
    if claim is not None and claim.status is ClaimStatus.COMPENSATED:
        return entry_for(record, CompensationStatus.ALREADY_COMPENSATED, attempts=claim.attempts)
    attempts = claim.attempts if claim is not None else 0

    # 2. What happened: an interrupted or failed call may or may not have had its effect.
    tool = tools.get(record.tool_name)
    output = record.output
    if record.status is not RecordStatus.SUCCEEDED:
        if tool is None or tool.recover is None:
            why = (
                f"tool {record.tool_name!r} is not in tools"
                if tool is None
                else "the tool has no recover hook"
            )
            return entry_for(
                record,
                CompensationStatus.UNCERTAIN,
                f"call is {record.status.value} and {why}: cannot tell whether its side effect happened",
                attempts,
            )
        if record.status is RecordStatus.RUNNING:
            # A running record may be a call still executing in a live process (its run was live when
            # condemned), not a crash: a probe now could read "not done" just before its effect lands and
            # the step would be lost. The record's execution guard and its execute lease tell the two
            # apart; when the call settles, its outcome reopens this unwind (Journal.complete_record).
            with journal.execution_guard(record.run_id, record.suffix) as free:
                if free:
                    record = journal.get_record(record.run_id, record.suffix) or record
                if not free or not journal.executor_gone(record):
                    return entry_for(
                        record,
                        CompensationStatus.UNCERTAIN,
                        "call is executing right now in another process"
                        + ("" if not free else " (its execute lease is live)")
                        + "; the unwind looks again once it settles",
                        attempts,
                    )
                probed = (
                    record
                    if record.status is RecordStatus.SUCCEEDED
                    else _probe(run_id, record, tool, attempts)
                )
        else:
            probed = _probe(run_id, record, tool, attempts)
        if isinstance(probed, CompensationEntry):
            return probed
        output = probed.output

    # 3. Nothing to call.
    if tool is None or tool.compensate is None:
        return entry_for(record, CompensationStatus.SKIPPED_NO_HOOK, attempts=attempts)

    # 3b. A person must approve this compensation: a denial skips it, no decision yet halts here
    # (a dry run shows the gate). Read afresh: a decision may have come since the worklist was read.
    gated = tool.compensation_needs_approval(record.input, output)
    if gated:
        gate = journal.get_gates([(record.origin_run_id, record.suffix)]).get(
            (record.origin_run_id, record.suffix)
        )
        if gate is not None and gate.decision is GateDecision.DENIED:
            why = f"compensation denied by {gate.actor}" + (f": {gate.reason}" if gate.reason else "")
            return entry_for(record, CompensationStatus.SKIPPED_DENIED, why, attempts, needs_approval=True)
        if gate is None and not dry_run:
            return entry_for(
                record,
                CompensationStatus.AWAITING_APPROVAL,
                f"waits for approve_compensation(run {run_id!r}, step {record.suffix!r})",
                attempts,
                needs_approval=True,
            )

    # 4. A plan only: nothing written, nothing called, never stops.
    if dry_run:
        return entry_for(record, CompensationStatus.WOULD_COMPENSATE, attempts=attempts, needs_approval=gated)

    # 5./6. Claim, then call the hook under a lease kept alive while it runs.
    owner = owner or new_owner()
    lock_owner = lock_owner or owner
    if lock is not None and not _lock_op(lock.acquire, key, lock_owner, ttl):
        return entry_for(record, CompensationStatus.BUSY, "another unwinder holds this step's lock", attempts)
    try:
        attempt = journal.claim_compensation(
            record.origin_run_id, record.suffix, via_run_id=run_id, owner=owner, ttl=ttl, idempotency_key=key
        )
        held = attempt.claim
        if not attempt.acquired:
            if held is not None and held.status is ClaimStatus.COMPENSATED:
                return entry_for(record, CompensationStatus.ALREADY_COMPENSATED, attempts=held.attempts)
            holder = held.owner if held is not None else "?"
            return entry_for(
                record,
                CompensationStatus.BUSY,
                f"step is being compensated by {holder}",
                held.attempts if held is not None else attempts,
            )
        assert held is not None
        if claim is not None and claim.status is ClaimStatus.CLAIMED and claim.owner != owner:
            metrics.CLAIM_TAKEOVERS.inc()  # a holder whose lease ran out: this attempt re-drives its step
        faults.point("after_claim", key)
        entry = _run_hook(
            journal, run_id, record, tool, output, key, owner, ttl, lock, lock_owner, held.attempts
        )
        return entry.model_copy(update={"needs_approval": True}) if gated else entry
    finally:
        if lock is not None:
            _lock_op(lock.release, key, lock_owner)


def _lock_op(op: Callable[..., Any], *args: Any) -> Any:
    """A lock operation that cannot fail the unwind: with Redis down, the journal claim alone decides
    (it is the truth anyway), so an unreachable lock reads as taken-by-us, not as busy."""
    try:
        return op(*args)
    except Exception:
        log.warning("step lock unavailable; relying on the journal claim alone", exc_info=True)
        return True


def _probe(run_id: str, record: ToolRecord, tool: Tool, attempts: int) -> CompensationEntry | RecoverResult:
    """Ask ``recover`` whether an interrupted or failed call took effect: its answer, or the entry it decides."""
    assert tool.recover is not None
    opts = CallOptions(
        execute_key(
            record.origin_run_id,
            record.mode,
            record.tool_name,
            record.tool_call_id,
            record.input,
        ),
        record.tool_call_id,
        run_id,
    )
    try:
        answer = call_hook(tool.recover, record.input, opts)
    except Exception as exc:
        return entry_for(
            record, CompensationStatus.UNCERTAIN, f"recover raised {exception_text(exc)}", attempts
        )
    if not isinstance(answer, RecoverResult):
        return entry_for(
            record,
            CompensationStatus.UNCERTAIN,
            f"recover answered {type(answer).__name__}, not a RecoverResult",
            attempts,
        )
    if not answer.done:
        return entry_for(record, CompensationStatus.SKIPPED_NOT_EXECUTED, attempts=attempts)
    return answer


def _run_hook(
    journal: Journal,
    run_id: str,
    record: ToolRecord,
    tool: Tool,
    output: object,
    key: str,
    owner: str,
    ttl: float,
    lock: StepLock | None,
    lock_owner: str,
    attempts: int,
) -> CompensationEntry:
    assert tool.compensate is not None

    def renew() -> bool:
        if lock is not None:
            _lock_op(lock.extend, key, lock_owner, ttl)
        return journal.renew_claim(record.origin_run_id, record.suffix, owner, ttl)

    opts = CallOptions(key, record.tool_call_id, run_id)
    with keeper.keep(renew, ttl / 3):
        started = time.perf_counter()
        try:
            faults.point("before_hook", key)
            call_hook(tool.compensate, record.input, output, opts)
            metrics.HOOK_SECONDS.labels(record.tool_name, "returned").observe(time.perf_counter() - started)
            faults.point("after_hook", key)
        except Exception as exc:
            metrics.HOOK_SECONDS.labels(record.tool_name, "raised").observe(time.perf_counter() - started)
            error = exception_text(exc)  # storable: the claim must be released, whatever the text
            journal.finish_claim(record.origin_run_id, record.suffix, owner, ClaimStatus.FAILED, error)
            return entry_for(record, CompensationStatus.FAILED, error, attempts)
    if not journal.finish_claim(record.origin_run_id, record.suffix, owner, ClaimStatus.COMPENSATED):
        # Our lease lapsed and another unwinder took the step: its outcome stands, ours is not written.
        faults.point("after_outcome", key)
        return entry_for(
            record,
            CompensationStatus.COMPENSATED,
            "lease expired before the outcome was written; another unwinder owns the step",
            attempts,
        )
    faults.point("after_outcome", key)
    return entry_for(record, CompensationStatus.COMPENSATED, attempts=attempts)


def finish_unwind(
    journal: Journal,
    report: CompensationReport,
    *,
    actor: str = "",
    reason: str = "",
    via: AuditVia = AuditVia.LIBRARY,
    unwind_id: str | None = None,
    epoch: int | None = None,
) -> None:
    """Audit the unwind's outcome, and tell the sweeper whether this run still needs work (an
    uncertain, failed or busy step; one awaiting a person's approval waits for that person instead).

    ``unwind_id`` makes the audit row once-only (a redelivered task ends the same unwind again).
    ``epoch`` is the run's unwind epoch as read with the worklist: a complete unwind says so only
    if no outcome landed since (one that did reopened the unwind, and the sweeper comes back)."""
    if report.dry_run:
        return
    halt = next((e.status.value for e in report.entries if e.status in HALTING), None)
    metrics.UNWINDS_FINISHED.labels(
        "complete" if report.complete else f"halted-{halt}" if halt else "incomplete"
    ).inc()
    journal.append_audit(
        NewAudit(
            report.run_id,
            AuditAction.UNWOUND,
            actor or default_actor(),
            via,
            reason,
            detail={"counts": report.counts(), "complete": report.complete, "unwind_id": unwind_id},
            event_key=None if unwind_id is None else f"unwound:{unwind_id}",
        )
    )
    if report.complete:
        journal.set_unwind_state(report.run_id, UnwindState.COMPLETE, epoch=epoch)
        return
    run = journal.get_run(report.run_id)
    if run is not None and run.unwind_state is UnwindState.ATTENTION:
        return
    pending = [
        e
        for e in report.entries
        if e.status not in (CompensationStatus.COMPENSATED, CompensationStatus.ALREADY_COMPENSATED)
    ]
    note = ", ".join(f"{e.suffix}: {e.status.value}" for e in pending[:5])
    # Due now: the sweeper applies its own backoff when it re-drives a run.
    next_at = (
        journal.now() if run is None or run.unwind_next_at is None else max(run.unwind_next_at, journal.now())
    )
    waiting = report.awaiting_approval
    if not waiting:
        journal.set_unwind_state(report.run_id, UnwindState.INCOMPLETE, note=note, next_at=next_at)
        return
    # Halted at a gate: the sweeper leaves the run alone until a person decides (the decision makes it
    # due). A decision that landed while this unwind ran would find the run not yet awaiting and wake
    # nothing, so look at the gate once more after saying so.
    journal.set_unwind_state(report.run_id, UnwindState.AWAITING, note=note, next_at=None)
    keys = [(e.origin_run_id, e.suffix) for e in waiting]
    if journal.get_gates(keys):
        journal.set_unwind_state(report.run_id, UnwindState.PENDING, note=note, next_at=journal.now())


def compensate_run(
    run_id: str,
    *,
    journal: Journal,
    tools: Mapping[str, Tool] | None = None,
    dry_run: bool = False,
    claim_ttl: float | None = None,
    lock: StepLock | None = None,
    actor: str | None = None,
    reason: str | None = None,
    via: AuditVia | str = AuditVia.LIBRARY,
) -> CompensationReport:
    """Condemn the run, then undo its steps in reverse execution order; one entry per step.

    ``actor`` (default: ``SAGA_ACTOR`` or the OS user), ``reason`` and ``via`` go to the run's audit
    trail: the ``condemned`` row (if this call writes the tombstone) and the unwind's ``unwound`` row.
    A dry run writes neither."""
    check_run_id(run_id)
    checked = check_tools(tools)
    who = check_actor(actor) if actor is not None else default_actor()
    why = check_reason(reason)
    through = check_via(via)
    view = begin_unwind(journal, run_id, dry_run=dry_run, audit=condemn_audit(run_id, who, why, through))
    worklist = list(reversed(view.records))
    entries = unwind(
        journal,
        run_id,
        worklist,
        checked,
        dry_run=dry_run,
        claim_ttl=claim_ttl,
        lock=lock,
        claims=view.claims,
    )
    # A tombstone is never lifted: once this unwind wrote it, the run is condemned.
    condemned = not dry_run or (view.run is not None and view.run.condemned)
    by, because = condemned_by(journal.read_audit(run_id)) if condemned else (None, None)
    report = CompensationReport(
        run_id=run_id,
        dry_run=dry_run,
        condemned=condemned,
        entries=entries,
        condemned_by=by,
        reason=because,
    )
    epoch = None if view.run is None else view.run.unwind_epoch
    finish_unwind(journal, report, actor=who, reason=why, via=through, epoch=epoch)
    return report


def unwind(
    journal: Journal,
    run_id: str,
    worklist: Sequence[ToolRecord],
    tools: Mapping[str, Tool],
    *,
    dry_run: bool,
    claim_ttl: float | None = None,
    lock: StepLock | None = None,
    claims: Mapping[tuple[str, str], CompensationClaim] | None = None,
) -> list[CompensationEntry]:
    """Apply the rules to each step of ``worklist`` (latest first) until one halts; ``claims`` are the
    steps' claims as read with the worklist (read here if not given)."""
    if claims is None:
        claims = journal.get_claims([(r.origin_run_id, r.suffix) for r in worklist])
    entries: list[CompensationEntry] = []
    stopped = False
    for record in worklist:
        if stopped:  # once stopped, nothing more is probed
            entries.append(entry_for(record, CompensationStatus.NOT_ATTEMPTED))
            continue
        entry = compensate_step(
            journal, run_id, record, tools, dry_run=dry_run, claim_ttl=claim_ttl, lock=lock, claims=claims
        )
        stopped = entry.status in HALTING
        entries.append(entry)
    return entries


def build_report(
    journal: Journal, run_id: str, entries: list[CompensationEntry], *, dry_run: bool
) -> CompensationReport:
    """The report of an unwind whose entries are known; a real unwind wrote the tombstone itself."""
    condemned = not dry_run
    if dry_run:
        run = journal.get_run(run_id)
        condemned = run is not None and run.condemned
    by, because = condemned_by(journal.read_audit(run_id)) if condemned else (None, None)
    return CompensationReport(
        run_id=run_id,
        dry_run=dry_run,
        condemned=condemned,
        entries=entries,
        condemned_by=by,
        reason=because,
    )
