"""One unwind as a chain of continuations (docs/reference/celery.md), on top of the engine's rules (docs/reference/compensation.md).

The coordinator writes the tombstone and records the worklist; each step task applies
``compensate_step`` to one step and stores its entry keyed ``(unwind_id, position)`` (with the
claim's outcome, in one commit, when it wrote one); the finalize task assembles the report from
those entries. Every write is insert-if-absent, so a duplicated or
redelivered message finds its work done and only passes the continuation on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from ..core.checks import check_run_id, check_step_suffix, check_unwind_id
from ..errors import InvalidInputError, MalformedRecordError
from ..journal.records import GroupPlan, ReportView, StepView, ToolRecord, UnwindEnd, UnwindInfo
from ..journal.roles import UnwindJournal
from ..locks.base import StepLock
from ..observing import tracing
from ..recording.tools import Tool
from .actors import check_via
from .attempt import Pretaken, StepAttempt, Unwinding
from .engine import (
    UNWOUND,
    UnwindRequest,
    build_report,
    count_finished,
    finish_unwind,
    unwound_audit,
)
from .entries import entry_for, missing_record_entry
from .groups import unwind_order
from .report import (
    CompensationEntry,
    CompensationReport,
    CompensationStatus,
    halts,
    until_halt_in_groups,
)
from .stepread import read_step
from .twins import Twins

# A fresh unwind owns its run for this many claim TTLs before the sweeper may re-drive it: condemn
# makes the run due at once, and re-driving an unwind that is running right now would only say busy.
SWEEP_GRACE_TTLS = 2.0


@dataclass(frozen=True)
class Step:
    """Run step ``suffix`` (at ``position`` of ``total``) of unwind ``unwind_id`` next."""

    run_id: str
    unwind_id: str
    suffix: str
    dry_run: bool
    position: int
    total: int
    # The entry of the step just run (None from the coordinator): what its task shows as its outcome.
    done: CompensationEntry | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Finalize:
    """Assemble the report next: the unwind reached its end or halted."""

    run_id: str
    unwind_id: str
    # The entry of the step just run (None from the coordinator): the halting one, after a halt.
    done: CompensationEntry | None = field(default=None, compare=False)
    # The unwind as the step just run read it (None from the coordinator): the report need not read
    # it again (an unwind's row is written once, insert-if-absent, and never changes).
    info: UnwindInfo | None = field(default=None, compare=False)
    # The report, when the last step wrote the unwind's end with its outcome (``_Ending``).
    report: CompensationReport | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Fan:
    """Run ``steps`` next, side by side: one wave of a group of a parallel unwind, each step its own
    task. Whichever of them ends the wave last sends what comes after it."""

    run_id: str
    unwind_id: str
    steps: tuple[Step, ...]
    done: CompensationEntry | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Wait:
    """Send nothing: other steps of this step's wave are still running, and the one that ends the
    wave goes on (a parallel unwind)."""

    run_id: str
    unwind_id: str
    done: CompensationEntry | None = field(default=None, compare=False)


Next = Step | Fan | Finalize | Wait


def step_owner(unwind_id: str, suffix: str) -> str:
    """The token every delivery of one step's message shares (see ``Twins``)."""
    return Twins.of(unwind_id, suffix).token


def start_unwind(
    journal: UnwindJournal,
    run_id: str,
    unwind_id: str,
    *,
    dry_run: bool,
    claim_ttl: float,
    actor: str | None = None,
    reason: str | None = None,
    via: str = "worker",
    parallel_max: int | None = None,
) -> Next:
    """The coordinator: tombstone first, then the worklist, recorded once per unwind (with who asked,
    why and through what, for the audit trail). Every id is checked against what the journal can
    store before anything is written.

    With ``parallel_max`` (a parallel unwind), the worklist goes group by group, last group first,
    and each group's steps run side by side, at most ``parallel_max`` at once (``GroupPlan``); a run
    that recorded no group of two or more unwinds exactly as a sequential one."""
    request = UnwindRequest.checked(run_id, actor=actor, reason=reason, via=via)
    check_unwind_id(unwind_id)
    with request.span(dry_run=dry_run, unwind_id=unwind_id) as span:
        view = request.begin(journal, dry_run=dry_run)
        span.worklist(len(view.records))
    worklist, plan = _worklist(view.records, parallel_max)
    epoch = None if view.run is None else view.run.unwind_epoch
    info = journal.record_unwind(
        unwind_id,
        run_id,
        dry_run=dry_run,
        suffixes=worklist,
        actor=request.actor,
        reason=request.reason,
        via=request.via.value,
        run_epoch=epoch,
        # A fresh unwind owns its run for a while: condemn made it due at once for the sweeper. The
        # journal holds the sweep in the same transaction, unless the stored unwind is a dry run or
        # another run's.
        hold_grace=SWEEP_GRACE_TTLS * claim_ttl,
        hold_note=f"unwind {unwind_id} in progress",
        groups=plan,
    )
    if info.run_id != run_id:
        raise InvalidInputError(f"unwind {unwind_id!r} belongs to run {info.run_id!r}, not {run_id!r}")
    return _next(info, 0)


def _worklist(records: Sequence[ToolRecord], parallel_max: int | None) -> tuple[list[str], GroupPlan | None]:
    """The steps in unwind order, and a parallel unwind's plan (None when every group is of one)."""
    if parallel_max is None:
        return [r.suffix for r in reversed(records)], None
    groups = unwind_order(records)
    worklist = [r.suffix for members in groups for r in members]
    if all(len(members) == 1 for members in groups):
        return worklist, None
    return worklist, GroupPlan(tuple(len(members) for members in groups), max(1, parallel_max))


def _next(info: UnwindInfo, position: int, done: CompensationEntry | None = None) -> Next:
    """What starts at ``position``: its step, or its wave of a group (``Fan``), or the report."""
    if position >= len(info.suffixes):
        return Finalize(info.run_id, info.unwind_id, done, info)
    wave = range(position, position + 1) if info.groups is None else info.groups.wave_of(position)
    steps = tuple(
        Step(info.run_id, info.unwind_id, info.suffixes[p], info.dry_run, p, len(info.suffixes), done)
        for p in wave
    )
    return steps[0] if len(steps) == 1 else Fan(info.run_id, info.unwind_id, steps, done)


def _checked(info: UnwindInfo | None, run_id: str, unwind_id: str) -> UnwindInfo:
    if info is None:
        raise InvalidInputError(f"unwind {unwind_id!r} of run {run_id!r} is not in the journal")
    if info.run_id != run_id:
        raise InvalidInputError(f"unwind {unwind_id!r} belongs to run {info.run_id!r}, not {run_id!r}")
    return info


def run_step(
    journal: UnwindJournal,
    tools: Mapping[str, Tool],
    run_id: str,
    unwind_id: str,
    suffix: str,
    *,
    claim_ttl: float,
    lock: StepLock | None = None,
    sleep: Callable[[float], None] = time.sleep,
    refusal: str | None = None,
) -> Next | None:
    """One step task: apply the engine's rules to one step, store the entry, say what comes next.

    Where the step stands is the journal's worklist's word, never the message's. Returns None when a
    live duplicate delivery of this very step holds it: that delivery carries the chain on, and this
    one must end without writing anything. With ``refusal`` (the step's workers were lost too often),
    a step not yet settled fails with that error and none of its tool's code is called."""
    check_run_id(run_id)  # every id in the message, before the journal is touched
    check_unwind_id(unwind_id)
    check_step_suffix(suffix)
    # All a step needs to know, with its claim (and lock) taken in the same statement where it can be.
    read = read_step(
        journal, tools, run_id, unwind_id, suffix, claim_ttl=claim_ttl, lock=lock, refusal=refusal
    )
    view = read.view
    info = _checked(view.unwind, run_id, unwind_id)
    position = view.position
    if position is None:
        raise InvalidInputError(f"step {suffix!r} is not in the worklist of unwind {unwind_id!r}")
    stored = view.entry
    ending = None
    if stored is None:
        ending = _Ending.of(journal, info, position)
        if info.groups is None:
            _check_in_order(info, view, suffix, position)
        else:
            _check_wave_before(journal, info, suffix, position)
        stored = _compensate(
            journal,
            tools,
            info,
            view,
            position,
            claim_ttl=claim_ttl,
            lock=lock,
            sleep=sleep,
            refusal=refusal,
            pretaken=read.pretaken,
            ending=ending,
        )
        if stored is None:
            return None
    done = stored_entry(info, position, stored)
    if info.groups is not None and len(info.groups.group_of(position)) > 1:
        return _after_group_step(journal, info, position, done)
    if halts(done.status):
        return Finalize(run_id, unwind_id, done, info)
    nxt = _next(info, position + 1, done)
    if ending is not None and ending.report is not None and isinstance(nxt, Finalize):
        return replace(nxt, report=ending.report)  # the end is written: the report is this one
    return nxt


class _Ending:
    """The last step of a sequential unwind (not a dry run) ends it in its outcome's commit: its
    report is assembled before that outcome is written, with the step's entry as it would be stored,
    and when that report is complete, the unwind's end (its state, its ``unwound`` row, as
    ``finish_unwind`` writes them) goes in the same commit (``Journal.finish_step``'s ``end``), as the
    in-process unwind's last outcome goes with its end (``finish_last_step``). Written only if the
    outcome was and the entry stored is this step's: the report is then the one ``finalize_unwind``
    would assemble (the entries before it are written once and never change). Anything else (an
    incomplete report, a lost claim, an entry there first) writes the outcome alone, and the report
    is assembled after it as before."""

    def __init__(self, journal: UnwindJournal, info: UnwindInfo, position: int) -> None:
        self.journal, self.info, self.position = journal, info, position
        self.candidate: CompensationReport | None = None
        self.report: CompensationReport | None = None  # once the end is written

    @classmethod
    def of(cls, journal: UnwindJournal, info: UnwindInfo, position: int) -> _Ending | None:
        last = info.groups is None and not info.dry_run and position == len(info.suffixes) - 1
        return cls(journal, info, position) if last else None

    def __call__(self, entry: CompensationEntry) -> UnwindEnd | None:
        info = self.info
        try:
            read = self.journal.read_report(info.unwind_id, info.run_id, UNWOUND, unwind=info)
            entries = {**read.entries, self.position: entry.model_dump(mode="json")}
            report = _assemble(self.journal, info, ReportView(info, entries, read.worklist))
        except Exception:  # the outcome goes on alone; the report, assembled after it, says why
            return None
        if not report.complete:
            return None
        self.candidate = report
        via = check_via(info.via)
        audit = unwound_audit(report, actor=info.actor, reason=info.reason, via=via, unwind_id=info.unwind_id)
        return UnwindEnd(info.run_epoch, audit)

    def ended(self) -> None:
        self.report = self.candidate


def _after_group_step(
    journal: UnwindJournal, info: UnwindInfo, position: int, done: CompensationEntry
) -> Next:
    """After a step of a group of two or more: nothing while its wave has a step without an entry;
    else the group's next wave, or, once the whole group has its entries, the report if one of them
    halts and the next group if none does. Two steps ending their wave together may both go on: the
    next step tasks keep their ids, and a duplicate delivery of a step finds its work done."""
    assert info.groups is not None
    entries = journal.list_unwind_entries(info.unwind_id)
    wave, group = info.groups.wave_of(position), info.groups.group_of(position)
    if any(p not in entries for p in wave):
        return Wait(info.run_id, info.unwind_id, done)
    if wave.stop < group.stop:
        return _next(info, wave.stop, done)
    if any(halts(stored_entry(info, p, entries[p]).status) for p in group):
        return Finalize(info.run_id, info.unwind_id, done, info)
    return _next(info, group.stop, done)


def run_rest(
    journal: UnwindJournal,
    tools: Mapping[str, Tool],
    nxt: Next,
    *,
    claim_ttl: float,
    lock: StepLock | None = None,
) -> Next:
    """The rest of an unwind in this process, step after step (an eager Celery task: no worker to
    hand each step to; a group's wave one step after the other); where it stopped: the end or a
    halt, or a step another delivery holds (the report then says what the journal says now)."""
    while isinstance(nxt, Step | Fan):
        moving: list[Next] = []
        for one in nxt.steps if isinstance(nxt, Fan) else (nxt,):
            step = run_step(
                journal, tools, one.run_id, one.unwind_id, one.suffix, claim_ttl=claim_ttl, lock=lock
            )
            if step is not None and not isinstance(step, Wait):
                moving.append(step)
        if not moving:
            break
        nxt = moving[-1]
    return nxt


def stored_entry(info: UnwindInfo, position: int, data: dict[str, Any]) -> CompensationEntry:
    """An entry as the journal holds it, parsed: one it cannot read (an unknown status, a missing
    field) fails closed, naming the run, the unwind, the step and the bad value, rather than being
    read as a step that did not halt."""
    try:
        return CompensationEntry.model_validate(data)
    except ValidationError as exc:
        suffix = info.suffixes[position] if 0 <= position < len(info.suffixes) else "?"
        status = data.get("status") if isinstance(data, dict) else None
        known = {s.value for s in CompensationStatus}
        reason = (
            f"unknown status {status!r}"
            if status not in known
            else "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        )
        raise MalformedRecordError(
            info.run_id, f"unwind {info.unwind_id!r} entry {position} (step {suffix!r})", reason
        ) from exc


def _check_in_order(info: UnwindInfo, view: StepView, suffix: str, position: int) -> None:
    """A step runs only once the step before it has an outcome that did not halt: a message sent out
    of order (by hand, or a stale continuation) must not undo a step the unwind never reached.

    Checking the step just before is enough: its entry was itself only written once the step before
    it had ended without halting, and so on back to the first."""
    if position == 0:
        return
    unwind_id = info.unwind_id
    previous = None if view.previous is None else stored_entry(info, position - 1, view.previous)
    why = (
        "has no outcome yet"
        if previous is None
        else f"halted the unwind ({previous.status.value})"
        if halts(previous.status)
        else None
    )
    if why is not None:
        raise InvalidInputError(
            f"step {suffix!r} (position {position}) of unwind {unwind_id!r} refused: the step before it "
            f"{why}; steps run in unwind order and stop at the first failed or busy one",
            unwind_id=unwind_id,
            suffix=suffix,
        )


def _check_wave_before(journal: UnwindJournal, info: UnwindInfo, suffix: str, position: int) -> None:
    """``_check_in_order`` for a parallel unwind: a step runs only once every step of the wave before
    it has an outcome and, when that wave ended the previous group, none of that group's halts."""
    assert info.groups is not None
    before = info.groups.wave_before(position)
    if before is None:
        return
    entries = journal.list_unwind_entries(info.unwind_id)
    missing = [info.suffixes[p] for p in before if p not in entries]
    previous = info.groups.group_of(before.start)
    halted = (
        []
        if missing or previous == info.groups.group_of(position)
        else [
            f"{info.suffixes[p]} ({entry.status.value})"
            for p in previous
            if halts((entry := stored_entry(info, p, entries[p])).status)
        ]
    )
    why = (
        f"the steps before it have no outcome yet: {', '.join(missing)}"
        if missing
        else f"the group before it halted the unwind: {', '.join(halted)}"
        if halted
        else None
    )
    if why is not None:
        raise InvalidInputError(
            f"step {suffix!r} (position {position}) of unwind {info.unwind_id!r} refused: {why}; groups "
            "run in unwind order and stop after the first with a failed or busy step",
            unwind_id=info.unwind_id,
            suffix=suffix,
        )


def _compensate(
    journal: UnwindJournal,
    tools: Mapping[str, Tool],
    info: UnwindInfo,
    view: StepView,
    position: int,
    *,
    claim_ttl: float,
    lock: StepLock | None,
    sleep: Callable[[float], None],
    refusal: str | None = None,
    pretaken: Pretaken | None = None,
    ending: _Ending | None = None,
) -> dict[str, Any] | None:
    """The step's verdict, stored: the entry the journal holds for it once this returns (an earlier
    delivery's, if one was there first). None when a live twin delivery holds the step.

    An attempt that writes the claim's outcome stores the entry in the same commit (``Twins.entry_at``);
    every other verdict (nothing to undo, busy, uncertain, ...) is stored here."""
    record, suffix = view.record, info.suffixes[position]
    if record is None:
        entry: CompensationEntry | None = missing_record_entry(
            info.run_id,
            suffix,
            CompensationStatus.UNCERTAIN,
            "the step's tool record is missing from the journal",
        )
    else:
        unwinding = Unwinding(
            journal, info.run_id, tools, claim_ttl, info.dry_run, lock, tools_named="this worker's tools"
        )
        claims = {} if view.claim is None else {(record.origin_run_id, record.suffix): view.claim}
        twins = Twins.of(info.unwind_id, suffix, sleep, position=position)
        attempt = StepAttempt(
            unwinding,
            record,
            claims=claims,
            twins=twins,
            refusal=refusal,
            pretaken=pretaken,
            end_with=ending,
        )
        entry = attempt.verdict()
        if attempt.ended and ending is not None:
            ending.ended()
        if attempt.stored is not None:
            return attempt.stored
    if entry is None:
        return None
    return journal.record_unwind_entry(info.unwind_id, position, entry.model_dump(mode="json"))


def finalize_unwind(
    journal: UnwindJournal,
    run_id: str,
    unwind_id: str,
    *,
    info: UnwindInfo | None = None,
    ended: CompensationReport | None = None,
) -> CompensationReport:
    """The report from the journal: stored entries up to the halt, ``not-attempted`` after it.
    ``info``: the unwind as the last step task read it (``Finalize.info``), not read again;
    ``ended``: the report whose end that step wrote with its outcome (``Finalize.report``), neither
    assembled nor written again."""
    check_run_id(run_id)
    check_unwind_id(unwind_id)
    if info is not None and (info.run_id, info.unwind_id) != (run_id, unwind_id):
        info, ended = None, None  # another unwind's: read this one's
    if info is not None and ended is not None:
        with _report_span(info) as span:
            count_finished(ended)
            span.report(ended)
            return ended
    # The unwind (unless given), its entries, the run, its steps and who condemned it: one read
    # (``read_report``).
    view = journal.read_report(unwind_id, run_id, UNWOUND, unwind=info)
    info = _checked(view.unwind, run_id, unwind_id)
    with _report_span(info) as span:
        report = _finalize(journal, info, view, run_id, unwind_id)
        span.report(report)
        return report


def _report_span(info: UnwindInfo) -> Any:
    return tracing.unwind(
        info.run_id,
        actor=info.actor,
        via=info.via or "worker",
        dry_run=info.dry_run,
        unwind_id=info.unwind_id,
        name="saga.unwind.report",
    )


def _finalize(
    journal: UnwindJournal, info: UnwindInfo, read: ReportView, run_id: str, unwind_id: str
) -> CompensationReport:
    """As the in-process unwind builds its report and ends the unwind: ``_assemble``, then
    ``finish_unwind``."""
    report = _assemble(journal, info, read)
    finish_unwind(
        journal,
        report,
        actor=info.actor,
        reason=info.reason,
        via=check_via(info.via),
        unwind_id=unwind_id,
        epoch=info.run_epoch,
    )
    return report


def _assemble(journal: UnwindJournal, info: UnwindInfo, read: ReportView) -> CompensationReport:
    """The report: the stored entries up to the halt, ``not-attempted`` after it, the run and who
    condemned it as ``read`` found them."""
    run_id = info.run_id
    stored, view = read.entries, read.worklist
    records = {r.suffix: r for r in view.records}

    def outcome(position: int) -> CompensationEntry | None:
        data = stored.get(position)  # None: the chain never got here, and nothing was probed
        return None if data is None else stored_entry(info, position, data)

    def not_attempted(position: int) -> CompensationEntry:
        suffix = info.suffixes[position]
        record = records.get(suffix) or journal.get_record(run_id, suffix)
        if record is None:
            return missing_record_entry(run_id, suffix, CompensationStatus.NOT_ATTEMPTED)
        return entry_for(record, CompensationStatus.NOT_ATTEMPTED)

    entries = until_halt_in_groups(info.position_groups(), outcome, not_attempted)
    # A dry run's report says whether the run was condemned (as read now); a real one condemned it.
    return build_report(
        journal,
        run_id,
        entries,
        dry_run=info.dry_run,
        run=view.run,
        condemner=view.condemner,
        records=view.records,
    )
