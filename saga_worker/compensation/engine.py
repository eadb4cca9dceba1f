"""The compensation engine (docs/reference/compensation.md): condemn first, then each step in reverse execution order.

The in-process ``compensate_run`` and the Celery tasks share these functions: ``begin_unwind`` writes
the tombstone and reads the worklist, ``attempt.StepAttempt`` applies the rules to one step,
``report.until_halt`` stops the unwind at the first step that halts it, ``build_report`` says whether the
run is condemned, and ``finish_unwind`` records whether the unwind is complete, for the sweeper.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import faults
from ..core.checks import check_actor, check_dry_run, check_parallel, check_reason, check_run_id
from ..core.frozen import quick
from ..core.leases import new_owner
from ..errors import MalformedRecordError, SagaError
from ..journal.records import (
    AuditAction,
    AuditVia,
    ClaimAttempt,
    CompensationClaim,
    FirstClaim,
    NewAudit,
    RecordStatus,
    RunInfo,
    ToolRecord,
    UnwindState,
    WorklistView,
    condemned_by,
)
from ..journal.retention import refuse_pruned
from ..journal.roles import UnwindJournal
from ..locks.base import StepLock
from ..observing import metrics, tracing
from ..recording.tools import Tool, check_tools
from ..settings import get_settings
from . import alerts
from .actors import check_via, default_actor
from .attempt import StepAttempt, Unwinding
from .carry import HeldOutcome, OutcomeCarry
from .entries import entry_for
from .groups import group_numbers, numbered, undo_in_groups
from .report import SETTLED, CompensationEntry, CompensationReport, CompensationStatus, until_halt

__all__ = [
    "begin_unwind",
    "build_report",
    "compensate_run",
    "finish_unwind",
    "undo_groups",
    "undo_steps",
    "UnwindRequest",
]
UNWOUND = (RecordStatus.SUCCEEDED, RecordStatus.FAILED, RecordStatus.RUNNING)


def begin_unwind(
    journal: UnwindJournal, run_id: str, *, dry_run: bool, audit: NewAudit | None = None
) -> WorklistView:
    """Write the tombstone (unless a dry run), then read the run, the steps to undo (in execution
    order), their claims and who condemned the run, in one read.

    The tombstone comes first so that no new side effect can start once the worklist is read. A
    malformed run or record row fails here, before any hook runs, not after them. So does a
    ``dry_run`` that is not a real boolean: it fails before the tombstone. ``audit`` (the
    ``condemned`` row) is written with the tombstone, by the call that writes it.

    A row the journal cannot parse (MalformedRecordError) ends the unwind before any step: the
    tombstone stands, no step is reported done, and the run's unwind stays pending with the error as
    its note (``saga-worker runs`` shows it; the sweeper retries with backoff, then flags a person)."""
    return _begin(journal, run_id, dry_run=dry_run, audit=audit)[0]


def _begin(
    journal: UnwindJournal,
    run_id: str,
    *,
    dry_run: bool,
    audit: NewAudit | None = None,
    first: FirstClaim | None = None,
) -> tuple[WorklistView, ClaimAttempt | None]:
    """``begin_unwind``, and with ``first``, the first step's claim in the tombstone's commit
    (``Journal.condemn_read_and_claim``): the attempt, or None when none was made."""
    plan_only = check_dry_run(dry_run)
    got = None
    try:
        if plan_only:
            view = journal.read_worklist(run_id, UNWOUND)
            refuse_pruned(view.run)
            return view, None
        # The reads ride in the tombstone's transaction where that costs no round trip (SQLite).
        if first is None:
            view = journal.condemn_and_read(run_id, UNWOUND, audit=audit)
        else:
            view, got = journal.condemn_read_and_claim(run_id, UNWOUND, audit=audit, first=first)
    except MalformedRecordError as exc:
        if not plan_only:  # the tombstone stands: the unwind has begun, and cannot go on yet
            metrics.inc(metrics.UNWINDS_STARTED)
            with contextlib.suppress(SagaError):  # the error itself is what the caller must see
                journal.hold_sweep(run_id, 0.0, f"cannot unwind: {exc}"[:2000])
        raise
    metrics.inc(metrics.UNWINDS_STARTED)
    if view.run is not None and view.run.pruned:
        _refuse_pruned_unwind(journal, view.run)
    return view, got


def _refuse_pruned_unwind(journal: UnwindJournal, run: RunInfo) -> None:
    """A pruned run's calls are gone: an unwind would find nothing and call the run undone. Read with
    the tombstone (no extra round trip on every unwind), so the stub is condemned by now: it waits
    for a person (``attention``), never for the sweeper, and the caller gets ``RunPrunedError``."""
    note = "pruned by retention: its calls are gone, nothing can be undone from the journal"
    with contextlib.suppress(SagaError):  # the refusal itself is what the caller must see
        journal.set_unwind_state(run.run_id, UnwindState.ATTENTION, note=note)
    refuse_pruned(run)


@quick
@dataclass(frozen=True)
class UnwindRequest:
    """Who asks to unwind which run, why and through what: checked once, before anything is written
    (the in-process ``compensate_run`` and the executor's ``start_unwind`` both start from one)."""

    run_id: str
    actor: str
    reason: str
    via: AuditVia

    @classmethod
    def checked(
        cls, run_id: str, *, actor: str | None, reason: str | None, via: AuditVia | str
    ) -> UnwindRequest:
        """The run id, the actor (default: ``SAGA_ACTOR`` or the OS user), the reason and ``via``,
        each refused with InvalidInputError if a journal could not store it or a terminal show it."""
        check_run_id(run_id)
        who = check_actor(actor) if actor is not None else default_actor()
        return cls(run_id, who, check_reason(reason), check_via(via))

    def condemn_audit(self) -> NewAudit:
        """The trail's ``condemned`` row, written with the tombstone by the call that writes it."""
        return NewAudit(self.run_id, AuditAction.CONDEMNED, self.actor, self.via, self.reason)

    def span(self, *, dry_run: bool, unwind_id: str | None = None) -> Any:
        """The unwind's tracing span (``tracing.unwind``)."""
        return tracing.unwind(
            self.run_id, actor=self.actor, via=self.via.value, dry_run=dry_run, unwind_id=unwind_id
        )

    def begin(self, journal: UnwindJournal, *, dry_run: bool) -> WorklistView:
        """``begin_unwind`` for this request: the tombstone with its ``condemned`` row, then the worklist."""
        return begin_unwind(journal, self.run_id, dry_run=dry_run, audit=self.condemn_audit())


def finish_unwind(
    journal: UnwindJournal,
    report: CompensationReport,
    *,
    actor: str = "",
    reason: str = "",
    via: AuditVia = AuditVia.LIBRARY,
    unwind_id: str | None = None,
    epoch: int | None = None,
    last: HeldOutcome | None = None,
) -> bool:
    """Audit the unwind's outcome, and tell the sweeper whether this run still needs work (an
    uncertain, failed or busy step; one awaiting a person's approval waits for that person instead).

    ``unwind_id`` makes the audit row once-only (a redelivered task ends the same unwind again).
    ``epoch`` is the run's unwind epoch as read with the worklist: a complete unwind says so only
    if no outcome landed since (one that did reopened the unwind, and the sweeper comes back).
    ``last``: the last step's outcome, still to write, of a complete in-process unwind: written in
    the same commit as the state. False when it was not written (its claim moved on): then nothing
    was, and the report, which said that step compensated, must be built again."""
    if report.dry_run:
        return True
    # The "unwound" row goes in the same transaction as the state it explains (one commit, not two).
    audit = unwound_audit(report, actor=actor, reason=reason, via=via, unwind_id=unwind_id)
    if last is not None:
        assert report.complete  # an incomplete unwind's last outcome is written before its report
        if not journal.finish_last_step(last.finished, report.run_id, epoch=epoch, audit=audit):
            return False
    elif report.complete:
        journal.set_unwind_state(report.run_id, UnwindState.COMPLETE, epoch=epoch, audit=audit)
    else:
        _leave_for_later(journal, report, audit)
    count_finished(report)
    return True


def unwound_audit(
    report: CompensationReport, *, actor: str, reason: str, via: AuditVia, unwind_id: str | None
) -> NewAudit:
    """The unwind's ``unwound`` audit row (``finish_unwind`` writes it with the unwind's state)."""
    return NewAudit(
        report.run_id,
        AuditAction.UNWOUND,
        actor or default_actor(),
        via,
        reason,
        detail={"counts": report.counts(), "complete": report.complete, "unwind_id": unwind_id},
        event_key=None if unwind_id is None else f"unwound:{unwind_id}",
    )


def count_finished(report: CompensationReport) -> None:
    """The metric of unwinds finished, by how (``finish_unwind``, or whoever wrote the end)."""
    halt = report.halt
    metrics.inc(
        metrics.UNWINDS_FINISHED,
        "complete" if report.complete else f"halted-{halt.value}" if halt else "incomplete",
    )


def _why_a_person_must_look(report: CompensationReport) -> str | None:
    """Why re-driving this incomplete unwind cannot help until a person acts (its ``attention``
    note), or None when the sweeper may come back to it."""
    lost = [e for e in report.entries if e.worker_lost]
    if lost:  # re-driving would run the step that keeps killing its worker again
        return f"{lost[0].suffix} (tool {lost[0].tool_name!r}): {lost[0].error}"
    unsettled = [e for e in report.entries if e.status not in SETTLED or e.tool_missing]
    if all(e.tool_missing for e in unsettled):
        # All that is left is steps whose tool the unwinder does not have: a person deploys it and
        # re-drives the run (`saga-worker redrive`).
        missing = ", ".join(f"{e.suffix} (tool {e.tool_name!r})" for e in unsettled[:5])
        return f"no tool for {missing} among the unwinder's tools; deploy it, then re-drive"
    return None


def _leave_for_later(journal: UnwindJournal, report: CompensationReport, audit: NewAudit) -> None:
    """An incomplete unwind: who comes back to it (the sweeper, a person, a decision at a gate)."""
    run = journal.get_run(report.run_id)
    if run is not None and run.unwind_state is UnwindState.ATTENTION:
        journal.append_audit(audit)  # the state stays as a person left it; the trail still says so
        return
    pending = [
        e
        for e in report.entries
        if e.status not in (CompensationStatus.COMPENSATED, CompensationStatus.ALREADY_COMPENSATED)
    ]
    note = ", ".join(f"{e.suffix}: {e.status.value}" for e in pending[:5])
    for_a_person = _why_a_person_must_look(report)
    if for_a_person is not None:
        journal.set_unwind_state(
            report.run_id, UnwindState.ATTENTION, note=for_a_person[:2000], next_at=None, audit=audit
        )
        unsettled = [e for e in report.entries if e.worker_lost or e.tool_missing]
        alerts.needs_attention(report.run_id, for_a_person, unsettled[0] if unsettled else None)
        return
    # Due now: the sweeper applies its own backoff when it re-drives a run.
    next_at = (
        journal.now() if run is None or run.unwind_next_at is None else max(run.unwind_next_at, journal.now())
    )
    waiting = report.awaiting_approval
    if not waiting:
        journal.set_unwind_state(
            report.run_id, UnwindState.INCOMPLETE, note=note, next_at=next_at, audit=audit
        )
        return
    # Halted at a gate: the sweeper leaves the run alone until a person decides (the decision makes it
    # due). A decision that landed while this unwind ran would find the run not yet awaiting and wake
    # nothing, so look at the gate once more after saying so.
    journal.set_unwind_state(report.run_id, UnwindState.AWAITING, note=note, next_at=None, audit=audit)
    keys = [(e.origin_run_id, e.suffix) for e in waiting]
    if journal.get_gates(keys):
        journal.set_unwind_state(report.run_id, UnwindState.PENDING, note=note, next_at=journal.now())


def compensate_run(
    run_id: str,
    *,
    journal: UnwindJournal,
    tools: Mapping[str, Tool] | None = None,
    dry_run: bool = False,
    claim_ttl: float | None = None,
    lock: StepLock | None = None,
    actor: str | None = None,
    reason: str | None = None,
    via: AuditVia | str = AuditVia.LIBRARY,
    parallel: bool = False,
) -> CompensationReport:
    """Condemn the run, then undo its steps in reverse execution order; one entry per step.

    ``actor`` (default: ``SAGA_ACTOR`` or the OS user), ``reason`` and ``via`` go to the run's audit
    trail: the ``condemned`` row (if this call writes the tombstone) and the unwind's ``unwound`` row.
    A dry run writes neither. ``parallel=True`` undoes the steps of each group the run recorded as
    concurrent side by side, groups still in reverse order (``groups.py``)."""
    request = UnwindRequest.checked(run_id, actor=actor, reason=reason, via=via)
    checked = check_tools(tools)
    side_by_side = check_parallel(parallel)
    with request.span(dry_run=dry_run) as span:
        report = _compensate_run(journal, request, checked, dry_run, claim_ttl, lock, side_by_side)
        span.report(report)
        return report


def _compensate_run(
    journal: UnwindJournal,
    request: UnwindRequest,
    checked: Mapping[str, Tool],
    dry_run: bool,
    claim_ttl: float | None,
    lock: StepLock | None,
    parallel: bool = False,
) -> CompensationReport:
    run_id = request.run_id
    ttl = claim_ttl if claim_ttl is not None else get_settings().claim_ttl
    # The first step's claim in the tombstone's commit (n+1 commits for n steps), unless a step lock
    # must be taken before it (the lock is per step, and the step is not known before the worklist).
    # Nor in a parallel unwind, whose group's steps are claimed side by side, each on its own.
    first = None if dry_run or parallel or lock is not None else _first_claim(run_id, checked, ttl)
    view, pretaken = _begin(journal, run_id, dry_run=dry_run, audit=request.condemn_audit(), first=first)
    worklist = list(reversed(view.records))
    if parallel:
        carry = None  # the steps of a group finish side by side: each outcome is its own commit
        entries = undo_groups(
            journal,
            run_id,
            worklist,
            checked,
            dry_run=dry_run,
            claim_ttl=claim_ttl,
            lock=lock,
            claims=view.claims,
        )
    else:
        carry = None if dry_run else OutcomeCarry(journal, pretaken, None if first is None else first.owner)
        entries = _undo(
            journal,
            run_id,
            worklist,
            checked,
            dry_run,
            claim_ttl,
            lock,
            claims=view.claims,
            carry=carry,
            groups=group_numbers(view.records),  # the report's numbers (``report_of``), given at birth
        )

    def report_of(entries: list[CompensationEntry]) -> CompensationReport:
        return build_report(
            journal,
            run_id,
            entries,
            dry_run=dry_run,
            run=view.run,
            condemner=view.condemner,
            records=view.records,
        )

    report = report_of(entries)
    epoch = None if view.run is None else view.run.unwind_epoch
    last = None
    if carry is not None and carry.held is not None:
        if report.complete:  # the last outcome goes in the commit of the unwind's end state
            last, carry.held = carry.held, None
        else:  # an incomplete unwind's is written on its own, before its state
            carry_last(carry, entries)
            report = report_of(entries)

    def finish(report: CompensationReport, last: HeldOutcome | None = None) -> bool:
        return finish_unwind(
            journal,
            report,
            actor=request.actor,
            reason=request.reason,
            via=request.via,
            epoch=epoch,
            last=last,
        )

    if finish(report, last):
        if last is not None:
            faults.point("after_outcome", last.key)
        return report
    # The last step's outcome was not written (its claim moved on): that step reads busy, and the
    # unwind is left for later as any halted one.
    assert last is not None
    report = report_of([*entries[:-1], last.lost])
    finish(report)
    return report


def _first_claim(run_id: str, tools: Mapping[str, Tool], ttl: float) -> FirstClaim:
    """What the tombstone's commit may claim: a step whose tool goes straight to its claim (a
    compensate hook, no approval rule: nothing of the app's runs before the claim)."""
    straight = frozenset(
        name
        for name, tool in tools.items()
        if tool.compensate is not None and tool.compensate_needs_approval is False
    )
    return FirstClaim(straight, new_owner(), run_id, ttl)


def carry_last(carry: OutcomeCarry, entries: list[CompensationEntry]) -> None:
    """Write the outcome still held (the last step's), and correct its entry if it was not written."""
    carry.flush()
    if carry.lost is not None:
        entries[-1] = carry.lost


def undo_steps(
    journal: UnwindJournal,
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
    steps' claims as read with the worklist (read here if not given). Every outcome is written when
    this returns."""
    carry = None if dry_run else OutcomeCarry(journal)
    entries = _undo(journal, run_id, worklist, tools, dry_run, claim_ttl, lock, claims=claims, carry=carry)
    if carry is not None:
        carry_last(carry, entries)
    return entries


def _undo(
    journal: UnwindJournal,
    run_id: str,
    worklist: Sequence[ToolRecord],
    tools: Mapping[str, Tool],
    dry_run: bool,
    claim_ttl: float | None,
    lock: StepLock | None,
    *,
    claims: Mapping[tuple[str, str], CompensationClaim] | None,
    carry: OutcomeCarry | None,
    groups: Mapping[tuple[str, str], int] | None = None,
) -> list[CompensationEntry]:
    """``undo_steps``, but the last step's outcome may still be held in ``carry`` when it returns
    (n+1 commits: each step's outcome goes with the next step's claim, the last one with the
    unwind's end state: ``carry.py``); its entry is the last one then. ``groups``: each step's group
    number, for the entries made here (``Unwinding.groups``)."""
    unwinding, known = _unwinding(
        journal, run_id, worklist, tools, dry_run, claim_ttl, lock, claims, carry, groups
    )
    done: list[CompensationEntry] = []

    def attempt(record: ToolRecord) -> CompensationEntry | None:
        held = None if carry is None else carry.held
        entry = StepAttempt(unwinding, record, claims=known).verdict()
        assert entry is not None  # only a twin delivery stands down, and there are none in process
        if carry is not None and carry.held is held:
            carry.flush()  # this step took no claim: the previous outcome is written before its entry
        if carry is not None and carry.lost is not None:
            done[-1] = carry.lost  # the step before lost its claim after all: it halts the unwind
            return None  # this step is not-attempted (it claimed nothing)
        done.append(entry)
        return entry

    def not_attempted(record: ToolRecord) -> CompensationEntry:
        return entry_for(record, CompensationStatus.NOT_ATTEMPTED)

    until_halt(worklist, attempt, not_attempted)  # where to stop; ``done`` has what was decided
    return done + [not_attempted(record) for record in worklist[len(done) :]]


def _unwinding(
    journal: UnwindJournal,
    run_id: str,
    worklist: Sequence[ToolRecord],
    tools: Mapping[str, Tool],
    dry_run: bool,
    claim_ttl: float | None,
    lock: StepLock | None,
    claims: Mapping[tuple[str, str], CompensationClaim] | None,
    carry: OutcomeCarry | None,
    groups: Mapping[tuple[str, str], int] | None = None,
) -> tuple[Unwinding, Mapping[tuple[str, str], CompensationClaim]]:
    """What every step of an in-process unwind shares, and the steps' claims (read here if not given)."""
    if claims is None:
        claims = journal.get_claims([(r.origin_run_id, r.suffix) for r in worklist])
    ttl = claim_ttl if claim_ttl is not None else get_settings().claim_ttl
    tools_named = "the tools given to compensate_run"
    unwinding = Unwinding(
        journal, run_id, tools, ttl, dry_run, lock, tools_named=tools_named, carry=carry, groups=groups
    )
    return unwinding, claims


def undo_groups(
    journal: UnwindJournal,
    run_id: str,
    worklist: Sequence[ToolRecord],
    tools: Mapping[str, Tool],
    *,
    dry_run: bool,
    claim_ttl: float | None = None,
    lock: StepLock | None = None,
    claims: Mapping[tuple[str, str], CompensationClaim] | None = None,
) -> list[CompensationEntry]:
    """As ``undo_steps``, but the steps of each group side by side (``groups.undo_in_groups``):
    ``worklist`` latest first, as there; at most ``SAGA_PARALLEL_MAX`` hooks at once."""
    unwinding, known = _unwinding(journal, run_id, worklist, tools, dry_run, claim_ttl, lock, claims, None)

    def attempt(record: ToolRecord) -> CompensationEntry:
        entry = StepAttempt(unwinding, record, claims=known).verdict()
        assert entry is not None  # only a twin delivery stands down, and there are none in process
        return entry

    return undo_in_groups(
        list(reversed(worklist)),
        attempt,
        lambda record: entry_for(record, CompensationStatus.NOT_ATTEMPTED),
        at_once=get_settings().parallel_max,
    )


def build_report(
    journal: UnwindJournal,
    run_id: str,
    entries: list[CompensationEntry],
    *,
    dry_run: bool,
    run: RunInfo | None,
    condemner: tuple[str | None, str | None] | None = None,
    records: Sequence[ToolRecord] | None = None,
) -> CompensationReport:
    """The report of an unwind whose entries are known. A real unwind wrote the tombstone itself, and a
    tombstone is never lifted: its run is condemned. A dry run's ``run`` (as read before it) is
    condemned if it already was. ``condemner`` is who condemned it as read with the worklist after the
    tombstone (``WorklistView.condemner``); without it, the trail is read here. ``records`` (the
    worklist, in execution order) number each entry's group."""
    condemned = not dry_run or (run is not None and run.condemned)
    if not condemned:
        by, because = None, None
    elif condemner is not None:
        by, because = condemner
    else:
        by, because = condemned_by(journal.read_audit(run_id))
    return CompensationReport(
        run_id=run_id,
        dry_run=dry_run,
        condemned=condemned,
        entries=entries if records is None else numbered(entries, records),
        condemned_by=by,
        reason=because,
    )
