"""The rows a journal keeps, as plain frozen values shared by every backend."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from ..core.frozen import quick
from ..errors import MalformedRecordError

E = TypeVar("E", bound=Enum)


class RunStatus(str, Enum):
    RUNNING = "running"  # started, neither finished nor failed yet (or crashed)
    FINISHED = "finished"  # the planner finished without an error
    FAILED = "failed"  # the planner finished with an error, or max_steps was reached
    UNKNOWN = "unknown"  # condemned before the journal ever saw it start


class RecordStatus(str, Enum):
    RUNNING = "running"  # claimed before execute: a crash leaves it here
    SUCCEEDED = "succeeded"  # execute returned; output recorded
    FAILED = "failed"  # execute raised; error and attempts recorded
    DENIED = "denied"  # a person said no (approvals): never executed
    SUSPENDED = "suspended"  # waiting for a person (approvals): never executed, no key used
    APPROVED = "approved"  # a person said yes: the next resume claims and executes it
    MIRRORED = "mirrored"  # a cross-run call: points at a shared execution no unwind touches


class ClaimStatus(str, Enum):
    CLAIMED = "claimed"  # a holder runs the compensate hook under a lease
    COMPENSATED = "compensated"  # the hook returned: the effect is undone
    FAILED = "failed"  # the hook raised: a later unwind retries it with the same key


class UnwindState(str, Enum):
    NONE = "none"  # never asked to unwind
    PENDING = "pending"  # condemned, unwind asked for but not yet complete
    COMPLETE = "complete"  # every step is undone or needs nothing
    INCOMPLETE = "incomplete"  # halted (failed/busy) or some step uncertain: the sweeper re-drives it
    ATTENTION = "attention"  # retry budget spent: a person must look
    AWAITING = "awaiting"  # halted at a compensation gate: waits for a person, not for the sweeper


def parse_status(kind: type[E], value: object, run_id: str, what: str) -> E:
    """A stored status as its enum member, or MalformedRecordError naming the run, the row and the
    value: a status this code does not know (another case, a newer or broken writer's value) fails
    closed wherever it is read, so no reader can mistake the row for one it may leave out."""
    # Every row read goes through here: the enum's own table of values first, which is what
    # ``kind(value)`` looks in too, after a call through ``EnumMeta.__call__`` and ``Enum.__new__``.
    try:
        member: E = kind._value2member_map_[value]  # type: ignore[assignment]  # (a cast is a call)
        return member
    except (KeyError, TypeError):  # not a value of this enum (TypeError: not even hashable)
        pass
    try:
        return kind(value)
    except ValueError as exc:
        raise MalformedRecordError(run_id, what, f"unknown status {value!r}") from exc


@quick
@dataclass(frozen=True)
class RunInfo:
    run_id: str
    status: RunStatus
    prompt: str
    text: str
    error: str | None
    condemned_at: float | None
    created_at: float
    updated_at: float
    source_run_id: str | None = None
    unwind_state: UnwindState = UnwindState.NONE
    unwind_attempts: int = 0
    unwind_next_at: float | None = None
    unwind_note: str | None = None
    unwind_epoch: int = 0  # bumped when an outcome lands after the tombstone: the unwind must look again
    # The span of the run's start (W3C traceparent), when it was traced: later spans of the run link to it.
    traceparent: str | None = None
    # When retention pruned the run (``saga-worker db prune``): its row stays as a stub, the rest is gone.
    pruned_at: float | None = None

    @property
    def condemned(self) -> bool:
        return self.condemned_at is not None

    @property
    def pruned(self) -> bool:
        return self.pruned_at is not None

    @property
    def ended(self) -> bool:
        return self.status in (RunStatus.FINISHED, RunStatus.FAILED)


# The output of a failed record whose tool raised NoEffect: nothing happened, nothing to undo. A failed
# execute never stores an output otherwise, so no tool can write this marker by what it raises.
NO_EFFECT_OUTPUT = {"no_effect": True}


@quick
@dataclass(frozen=True)
class ToolRecord:
    """One tool execution, keyed ``(run_id, suffix)``; ``origin_run_id`` is whose effect it is (forks)."""

    run_id: str
    suffix: str
    seq: int
    step: int
    tool_call_id: str
    tool_name: str
    mode: str
    input: Any
    status: RecordStatus
    output: Any = None
    error: str | None = None
    attempts: int = 1
    origin_run_id: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    # A mirror's shared execution (``"{tool_name}:{hash16}:{generation}"``); None for any other record.
    shared_id: str | None = None
    exec_owner: str | None = None  # the token of the process that last claimed it to execute
    exec_lease_expires_at: float | None = None  # journal clock; renewed while execute runs
    # The span of the execute that settled it (W3C traceparent), when traced: its compensate span links to it.
    exec_traceparent: str | None = None
    # The group of calls the run recorded as concurrent with this one (an opaque token, written with
    # the call's claim); None: a group of one (compensation/groups.py numbers them).
    group: str | None = None

    @property
    def had_no_effect(self) -> bool:
        """A failed call whose tool said nothing happened (it raised ``NoEffect``)."""
        return self.status is RecordStatus.FAILED and self.output == NO_EFFECT_OUTPUT


@quick
@dataclass(frozen=True)
class CompensationClaim:
    """The compensation state of one effect, keyed ``(origin_run_id, suffix)``: the truth about who undoes it."""

    origin_run_id: str
    suffix: str
    status: ClaimStatus
    owner: str
    lease_expires_at: float
    attempts: int
    idempotency_key: str
    via_run_id: str
    error: str | None
    started_at: float
    finished_at: float | None
    # Where the journal keeps the lease on a clock that cannot step (SQLite: journal/boot_clock.py):
    # the boot, the deadline on its monotonic clock, the attempt they were written at. None elsewhere.
    lease_boot_id: str | None = None
    lease_boot_expires_at: float | None = None
    lease_boot_attempt: int | None = None


@quick
@dataclass(frozen=True)
class ClaimAttempt:
    """The answer to "may I compensate this step?": ``acquired``, or the state that says why not."""

    acquired: bool
    claim: CompensationClaim | None


@quick
@dataclass(frozen=True)
class FinishedClaim:
    """A claim's outcome, to be written while ``owner`` still holds it (``Journal.finish_and_claim``)."""

    origin_run_id: str
    suffix: str
    owner: str
    status: ClaimStatus
    error: str | None = None


@quick
@dataclass(frozen=True)
class FirstClaim:
    """The first step's claim, to take in the tombstone's own commit (``Journal.condemn_read_and_claim``).

    The first step to undo is the run's latest record among the statuses read; it is claimed only if
    it succeeded and its tool is one of ``tools`` (the unwinder's tools whose step goes from the
    worklist straight to its claim: a compensate hook, no approval rule, nothing of the app's to ask
    first). Any other first step takes no claim here: the unwind claims it (or not) as before."""

    tools: frozenset[str]
    owner: str
    via_run_id: str
    ttl: float

    def target(self, records: Sequence[ToolRecord]) -> ToolRecord | None:
        """The record to claim among ``records`` (the worklist, in execution order), if any."""
        if not records:
            return None
        last = records[-1]
        straight = last.status is RecordStatus.SUCCEEDED and last.tool_name in self.tools
        return last if straight else None


@dataclass(frozen=True)
class StepFinish:
    """What ``Journal.finish_step`` did: whether the claim's outcome was ``written`` (this caller still
    owned the claim), and the unwind ``entry`` stored for the step, which is an earlier delivery's
    when one was there first."""

    written: bool
    entry: dict[str, Any]
    # The unwind's end (``UnwindEnd``) went in the same commit: the outcome was written and the entry
    # stored was this call's.
    ended: bool = False


@dataclass(frozen=True)
class UnwindEnd:
    """A distributed unwind's end, written with its last step's outcome (``Journal.finish_step``):
    the run's unwind state ``complete`` (only while its epoch is ``epoch``, unless None) with the
    unwind's ``unwound`` audit row, as ``finish_unwind`` writes them for a complete report."""

    epoch: int | None
    audit: NewAudit


@dataclass(frozen=True)
class NewRecord:
    """What a tool call writes at its first claim."""

    suffix: str
    step: int
    tool_call_id: str
    tool_name: str
    mode: str
    input: Any
    origin_run_id: str
    # ``suspended`` for a call that waits for a person, ``mirrored`` for a cross-run one.
    status: RecordStatus = RecordStatus.RUNNING
    shared_id: str | None = None
    # The group the run records this call in (``ToolRecord.group``), or None: a group of one.
    group: str | None = None


class GateDecision(str, Enum):
    APPROVED = "approved"  # a person allowed this compensation: the next unwind calls the hook
    DENIED = "denied"  # a person refused it: the step reads skipped-denied


@dataclass(frozen=True)
class CompensationGate:
    """A person's decision on one approval-gated compensation, keyed ``(origin_run_id, suffix)``."""

    origin_run_id: str
    suffix: str
    decision: GateDecision
    actor: str
    reason: str
    decided_at: float
    via_run_id: str


class SharedStatus(str, Enum):
    RUNNING = "running"  # claimed before execute: a crash leaves it here
    SUCCEEDED = "succeeded"  # execute returned: every mirror in the window replays this output
    FAILED = "failed"  # execute raised


@dataclass(frozen=True)
class SharedAction:
    """One execution of a cross-run tool, shared by every run that calls it identically in its window.

    ``key`` is its idempotency key (``"{tool_name}:{hash16}"``); ``generation`` counts executions of
    that key, one per window; ``shared_id`` is ``"{key}:{generation}"``."""

    shared_id: str
    key: str
    generation: int
    tool_name: str
    input: Any
    status: SharedStatus
    output: Any
    error: str | None
    attempts: int
    run_id: str  # the run whose call executed it
    created_at: float
    expires_at: float

    def live(self, now: float) -> bool:
        return now < self.expires_at


class AuditAction(str, Enum):
    CONDEMNED = "condemned"  # the tombstone was written (the first time only)
    APPROVED = "approved"  # a suspended call was approved
    DENIED = "denied"  # a suspended call was denied
    COMPENSATION_APPROVED = "compensation-approved"  # an approval-gated compensation was allowed
    COMPENSATION_DENIED = "compensation-denied"  # an approval-gated compensation was refused
    UNWOUND = "unwound"  # an unwind ended: its entries' counts by status
    UNWIND_QUEUED = "unwind-queued"  # an operator's unwind was sent to the workers (target: its task id)


class AuditVia(str, Enum):
    LIBRARY = "library"  # a call of the Python API
    CLI = "cli"  # the saga-worker command
    WORKER = "worker"  # a Celery task sent by an app
    SWEEPER = "sweeper"  # the beat sweeper's re-drive
    CONSOLE = "console"  # a form of saga-worker serve (the actor is the console token's name)


@quick
@dataclass(frozen=True)
class NewAudit:
    """An audit row to append. ``event_key``, when set, makes the append insert-if-absent (a
    redelivered task that ends the same unwind again writes its row once)."""

    run_id: str
    action: AuditAction
    actor: str
    via: AuditVia
    reason: str = ""
    target: str | None = None
    detail: dict[str, Any] | None = None
    event_key: str | None = None


@dataclass(frozen=True)
class AuditRecord:
    """One row of a run's append-only audit trail, as stored (``at`` by the journal's clock)."""

    id: int
    run_id: str
    at: float
    action: AuditAction
    actor: str
    via: AuditVia
    reason: str
    target: str | None
    detail: dict[str, Any]


def condemned_by(rows: list[AuditRecord]) -> tuple[str | None, str | None]:
    """Who wrote the tombstone and why, from a trail (None, None if it does not say)."""
    for row in rows:
        if row.action is AuditAction.CONDEMNED:
            return row.actor, row.reason or None
    return None, None


@dataclass(frozen=True)
class GroupPlan:
    """How a parallel distributed unwind (``parallel=True`` on a worker) cuts its worklist: ``sizes``
    are its groups' lengths in unwind order (they add up to the worklist's length), and a group runs
    in waves of at most ``at_once`` step tasks. A sequential unwind has none: every step is a group
    of one, each wave one step.

    Positions are the worklist's. A step may start once every step of the wave before it has an
    entry, and, when that wave ends the group before, none of that group's entries halts."""

    sizes: tuple[int, ...]
    at_once: int

    def __post_init__(self) -> None:
        if self.at_once < 1 or any(size < 1 for size in self.sizes):
            raise ValueError(
                f"a group plan needs positive sizes and at_once, not {self.sizes}, {self.at_once}"
            )

    def as_json(self) -> dict[str, Any]:
        return {"sizes": list(self.sizes), "at_once": self.at_once}

    @classmethod
    def from_json(cls, data: Any) -> GroupPlan:
        """The stored plan; ``ValueError`` for anything else."""
        if not isinstance(data, dict):
            raise ValueError("not an object")
        sizes, at_once = data.get("sizes"), data.get("at_once")
        if not isinstance(sizes, list) or not all(type(n) is int for n in sizes) or type(at_once) is not int:
            raise ValueError(f"sizes {sizes!r} and at_once {at_once!r} are not integers")
        return cls(tuple(sizes), at_once)

    def group_of(self, position: int) -> range:
        """The positions of ``position``'s group."""
        start = 0
        for size in self.sizes:
            if position < start + size:
                return range(start, start + size)
            start += size
        raise ValueError(f"position {position} is past the plan's {start} steps")

    def wave_of(self, position: int) -> range:
        """The positions of ``position``'s wave: its group cut in slices of ``at_once``."""
        group = self.group_of(position)
        start = group.start + (position - group.start) // self.at_once * self.at_once
        return range(start, min(start + self.at_once, group.stop))

    def groups(self) -> list[range]:
        """Every group's positions, in unwind order."""
        out, start = [], 0
        for size in self.sizes:
            out.append(range(start, start + size))
            start += size
        return out

    def wave_before(self, position: int) -> range | None:
        """The wave that must end before ``position``'s starts (None for the first wave)."""
        wave = self.wave_of(position)
        return None if wave.start == 0 else self.wave_of(wave.start - 1)


@dataclass(frozen=True)
class UnwindInfo:
    """One distributed unwind of a run (the Celery executor): its worklist, fixed when it began.

    ``suffixes`` are the steps in unwind order; entries written for it are keyed by position.
    ``groups``: a parallel unwind's plan (None: one step after the other)."""

    unwind_id: str
    run_id: str
    dry_run: bool
    suffixes: tuple[str, ...]
    created_at: float
    # Who asked for it, why and through what (for the audit row written when it ends).
    actor: str = ""
    reason: str = ""
    via: str = "worker"
    run_epoch: int | None = None  # the run's unwind epoch when the worklist was read
    groups: GroupPlan | None = None  # migration 0013

    def position_groups(self) -> list[range]:
        """The worklist's positions by group, in unwind order (a sequential unwind: one step each)."""
        if self.groups is None:
            return [range(p, p + 1) for p in range(len(self.suffixes))]
        return self.groups.groups()


@quick
@dataclass(frozen=True)
class WorklistView:
    """What an unwind reads before its first step, together (one transaction on SQL): the run, its
    records of the given statuses in execution order, and the compensation claims of those records."""

    run: RunInfo | None
    records: list[ToolRecord]
    claims: dict[tuple[str, str], CompensationClaim]
    # Who wrote the tombstone and why, as the trail's first ``condemned`` row says (None, None if the
    # run is not condemned or its trail does not say): the report's ``condemned_by`` and ``reason``.
    # That row is written with the tombstone, so it cannot change once the tombstone is read.
    condemner: tuple[str | None, str | None] = (None, None)


@dataclass(frozen=True)
class ReportView:
    """What assembling a distributed unwind's report reads, together (one round trip on PostgreSQL):
    the unwind as recorded (None if it is not in the journal), the entries its steps stored so far by
    position, and the run's worklist as ``read_worklist`` reads it but for the claims (none read: the
    entries say what each step did), records included even when every step has its entry: the
    report numbers each step's group by them."""

    unwind: UnwindInfo | None
    entries: dict[int, dict[str, Any]]
    worklist: WorklistView


@dataclass(frozen=True)
class StepView:
    """What one step task of a distributed unwind needs to know, read together (one transaction on SQL).

    ``position`` is the step's place in the unwind's worklist (None if it is not there), ``entry``
    the outcome this unwind already stored for it, ``record`` the tool record, and ``claim`` the
    compensation claim of the record's origin run. ``previous`` is the entry stored at the position
    before (None at position 0, or while the step before has no outcome yet): a step may run only
    after the one before it ended without halting."""

    unwind: UnwindInfo | None
    position: int | None
    entry: dict[str, Any] | None
    record: ToolRecord | None
    claim: CompensationClaim | None
    previous: dict[str, Any] | None = None
    # The step's claim, taken by this read (``read_step``'s ``claim``): ``claim`` is as it was before.
    taken: CompensationClaim | None = None


@dataclass(frozen=True)
class StepClaim:
    """A step task's claim, to take in the step's own read (``Journal.read_step``), where a journal
    can fold the two into one statement (PostgreSQL; elsewhere nothing is claimed by the read).

    Taken only for a step that goes from its read straight to its claim: the run's own effect (the
    caller holds the step lock of that key), a succeeded call whose tool is one of ``tools`` (a
    compensate hook, no approval rule), in order (the entry before it stored with a status of
    ``goes_on``, none of ``halts``), no entry of its own yet and no claim row at all. Any other step
    is read only, and claimed (or not) as before."""

    tools: frozenset[str]
    owner: str
    via_run_id: str
    ttl: float
    goes_on: frozenset[str]
    halts: frozenset[str]


@dataclass(frozen=True)
class JournalSize:
    """How big the journal is: its runs (pruned stubs apart) and the oldest one it still holds."""

    runs: int
    pruned: int
    oldest_run_id: str | None
    oldest_at: float | None  # when it was last updated: the age retention judges by


@dataclass(frozen=True)
class RunQuery:
    """One page of the runs listing (the console, ``saga-worker runs``): filters and a keyset cursor.

    Newest updated first. ``before`` is the ``(updated_at, run_id)`` of the last run of the previous
    page: the next page starts strictly after it, so a page costs the same however deep it is (no
    OFFSET). ``search`` matches the start of the run id (an index serves it); ``contains`` matches any
    part of it, case-insensitively: its whitespace-separated words, in that order (the page index is
    walked and filtered)."""

    status: RunStatus | None = None
    condemned: bool | None = None
    unwind_state: UnwindState | None = None
    search: str | None = None
    before: tuple[float, str] | None = None
    limit: int = 50
    contains: str | None = None


def contains_words(run_id: str, text: str) -> bool:
    """Whether ``run_id`` holds the words of ``text`` in order, ignoring case (``contains``)."""
    at, folded = 0, run_id.lower()
    for word in text.lower().split():
        found = folded.find(word, at)
        if found < 0:
            return False
        at = found + len(word)
    return True


def like_pattern(text: str) -> str:
    """``contains`` as a LIKE pattern (escape ``\\``) on the lower-cased id: ``%w1%w2%``."""
    words = [w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") for w in text.lower().split()]
    return "%" + "%".join(words) + "%"
