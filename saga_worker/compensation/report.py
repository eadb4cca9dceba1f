"""The compensation report: one honest entry per step, in unwind order (docs/reference/compensation.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict


class CompensationStatus(str, Enum):
    COMPENSATED = "compensated"  # the compensate hook returned in this unwind
    ALREADY_COMPENSATED = "already-compensated"  # an earlier unwind (of this run or a fork) undid it
    WOULD_COMPENSATE = "would-compensate"  # dry run: the hook would be called
    SKIPPED_NO_HOOK = (
        "skipped-no-hook"  # the tool has no compensate hook (or is not in tools: see tool_missing)
    )
    SKIPPED_NOT_EXECUTED = "skipped-not-executed"  # recover says the interrupted call never took effect
    UNCERTAIN = "uncertain"  # interrupted call, and nothing can tell whether it took effect
    BUSY = "busy"  # another unwinder holds this step right now; the unwind stops
    AWAITING_APPROVAL = "awaiting-approval"  # the compensation needs a person's approval; the unwind stops
    SKIPPED_DENIED = "skipped-denied"  # a person denied this compensation: the effect stays
    FAILED = "failed"  # the compensate hook raised; the unwind stops, a later call retries
    NOT_ATTEMPTED = "not-attempted"  # the unwind stopped before this step; nothing was probed


HALTING = frozenset(
    {CompensationStatus.BUSY, CompensationStatus.FAILED, CompensationStatus.AWAITING_APPROVAL}
)


def halts(status: object) -> bool:
    """Does a step of this status halt the unwind (busy, failed, awaiting approval)? Every step after
    it is ``not-attempted``, and nothing more is probed. Takes a status or its value (a report's JSON,
    a stored entry); a value this code does not know does not halt."""
    # A str enum's member hashes and compares as its text, so the set answers for either (asked of
    # every step of every unwind: ``CompensationStatus(status)`` would cost two calls more).
    try:
        return status in HALTING
    except TypeError:  # not even hashable: no status
        return False


def halted_at(statuses: Iterable[object]) -> CompensationStatus | None:
    """The status of the first step that halts the unwind, or None: the one reading of "stop at the
    first halting step" for a report, its JSON (the CLI's exit codes) and a stored unwind (views)."""
    return next((CompensationStatus(s) for s in statuses if halts(s)), None)


T = TypeVar("T")
E = TypeVar("E")


def _status_of(entry: Any) -> object:
    return entry.status


def until_halt(
    steps: Iterable[T],
    outcome: Callable[[T], E | None],
    not_attempted: Callable[[T], E],
    status: Callable[[E], object] = _status_of,
) -> list[E]:
    """Each step's ``outcome`` until one halts the unwind (``halts``: failed, busy, awaiting
    approval); every step after it is ``not_attempted``, and nothing more is probed. An outcome of
    None (a distributed unwind's chain never got to that step) stops there too, that step included.
    The one walk for the in-process unwind, the executor's report and a stored unwind's view;
    ``status`` reads an outcome's status (an entry's ``status`` unless told)."""
    entries: list[E] = []
    stopped = False
    for step in steps:
        entry = None if stopped else outcome(step)
        if entry is None:
            stopped = True
            entry = not_attempted(step)
        else:
            stopped = halts(status(entry))
        entries.append(entry)
    return entries


def until_halt_in_groups(
    groups: Iterable[Sequence[T]],
    outcome: Callable[[T], E | None],
    not_attempted: Callable[[T], E],
    status: Callable[[E], object] = _status_of,
) -> list[E]:
    """``until_halt`` over groups of independent steps (a parallel unwind): every step of a group is
    probed; after a group in which a step halts, or one whose outcome is None (the unwind never
    finished it: that step is ``not_attempted``), every step is ``not_attempted``. Groups of one
    step each walk exactly as ``until_halt``."""
    entries: list[E] = []
    stopped = False
    for group in groups:
        if stopped:
            entries.extend(not_attempted(step) for step in group)
            continue
        for step in group:
            entry = outcome(step)
            if entry is None:
                stopped = True
                entry = not_attempted(step)
            elif halts(status(entry)):
                stopped = True
            entries.append(entry)
    return entries


# Steps that need nothing more: an unwind whose entries are all settled is complete.
SETTLED = frozenset(
    {
        CompensationStatus.COMPENSATED,
        CompensationStatus.ALREADY_COMPENSATED,
        CompensationStatus.SKIPPED_NO_HOOK,
        CompensationStatus.SKIPPED_NOT_EXECUTED,
        CompensationStatus.SKIPPED_DENIED,
    }
)


class CompensationEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    suffix: str
    tool_call_id: str
    tool_name: str
    status: CompensationStatus
    error: str | None = None
    # What the run's record said happened: succeeded, failed or running.
    record_status: str
    # The key the compensate hook is (or would be) handed: stable across retries.
    idempotency_key: str
    # Whose effect this is (a fork's copied step belongs to the run it was copied from).
    origin_run_id: str
    # Compensation attempts the journal has counted for this step, across all unwinds.
    attempts: int = 0
    # The tool gates this compensation on a person's approval (approve_compensation).
    needs_approval: bool = False
    # No tool of this name among the unwinder's tools (a deploy without it): the entry reads
    # skipped-no-hook, but nothing was undone, so the unwind is not complete (a person must look).
    tool_missing: bool = False
    # The worker processes running this step's task were lost too often (SAGA_MAX_DELIVERIES: a hook
    # that kills its process, the OOM killer): the step read failed without any of its tool's code
    # being called again, and the unwind is flagged for a person instead of being re-driven.
    worker_lost: bool = False
    # The step's group (docs/reference/compensation.md, "Groups"): its position in execution order,
    # 1 for the first; a call the run did not record in a group is a group of one.
    group: int = 0


class CompensationReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    dry_run: bool
    condemned: bool
    entries: list[CompensationEntry]
    # Who wrote the tombstone, and why (from the run's audit trail; None if it does not say).
    condemned_by: str | None = None
    reason: str | None = None

    @property
    def complete(self) -> bool:
        """True when every step is undone or needs nothing (no uncertain, failed, busy or skipped-over
        step, and none whose tool the unwinder did not have)."""
        if self.dry_run:
            return False
        for e in self.entries:  # noqa: SIM110 - a loop, not all() over a generator: read per unwind
            if e.status not in SETTLED or e.tool_missing:
                return False
        return True

    @property
    def missing_tools(self) -> list[CompensationEntry]:
        """The steps skipped because the unwinder had no tool of their name."""
        return [e for e in self.entries if e.tool_missing]

    @property
    def halted(self) -> bool:
        return self.halt is not None

    @property
    def halt(self) -> CompensationStatus | None:
        """The status of the step the unwind stopped at (see ``halted_at``), or None."""
        return halted_at(e.status for e in self.entries)

    @property
    def awaiting_approval(self) -> list[CompensationEntry]:
        """The steps the unwind stopped at for a person's approval: at most one, but in a parallel
        unwind every gated step of the group it stopped in."""
        return [e for e in self.entries if e.status is CompensationStatus.AWAITING_APPROVAL]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for entry in self.entries:
            value = entry.status._value_  # (``.value`` is a descriptor: two calls a read)
            out[value] = out.get(value, 0) + 1
        return out
