"""The journal's parts by area, each an interface a backend implements (``Journal`` composes them).

A part lists what one area needs from storage: runs and their planner decisions, tool records,
approvals and the audit trail, cross-run shared executions, compensation claims, and the unwind
bookkeeping (the sweeper's state and the distributed unwinds). Each is a ``Protocol``, so a
consumer that uses one or two areas is typed against those parts alone (see ``uses``) and any
journal fits it; ``Journal`` (``base.py``) inherits every part and adds what spans parts.

Every write is idempotent by construction: inserts are insert-if-absent, updates are
compare-and-set on the state they expect, so a retried or duplicated message cannot corrupt state.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..errors import MalformedRecordError
from .records import (
    AuditRecord,
    ClaimAttempt,
    ClaimStatus,
    CompensationClaim,
    CompensationGate,
    GroupPlan,
    JournalSize,
    NewAudit,
    NewRecord,
    RecordStatus,
    RunInfo,
    RunQuery,
    RunStatus,
    SharedAction,
    SharedStatus,
    ToolRecord,
    UnwindInfo,
    UnwindState,
)
from .retention import Archive


class Clock(Protocol):
    @abc.abstractmethod
    def now(self) -> float:
        """The journal's clock (the database's for PostgreSQL), so leases do not depend on a worker's clock."""


class RunsPart(Clock, Protocol):
    """Runs, their tombstones and forks, and the planner's decisions."""

    @abc.abstractmethod
    def start_run(self, run_id: str, prompt: str, *, traceparent: str | None = None) -> tuple[RunInfo, bool]:
        """Create the run if absent; return it and whether it was created. ``traceparent`` (the span
        that started it, when traced) is stored with a run it creates.

        Raises CompensatedRunError, writing nothing, if the run is condemned."""

    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunInfo | None: ...

    def list_runs(self, *, limit: int = 100, condemned_only: bool = False) -> list[RunInfo]:
        """Most recently updated first (a ``page_runs`` query: tests and scripts use it)."""
        return self.page_runs(RunQuery(limit=limit, condemned=True if condemned_only else None))

    @abc.abstractmethod
    def page_runs(self, query: RunQuery) -> list[RunInfo]:
        """One page of runs matching ``query``, newest updated first (see ``RunQuery``)."""

    @abc.abstractmethod
    def count_runs(self, unwind_state: UnwindState) -> int:
        """How many runs are in ``unwind_state`` (the console's attention gauge)."""

    @abc.abstractmethod
    def end_run(self, run_id: str, status: RunStatus, text: str, error: str | None) -> RunInfo:
        """Record the run's end once; a second end keeps the first (returned)."""

    @abc.abstractmethod
    def condemn(self, run_id: str, *, audit: NewAudit | None = None) -> float:
        """Write the tombstone if absent (also for a run never seen); return its time.

        The tombstone is on stable storage when this returns: hooks run only after it, and a
        tombstone lost to a power cut would let the run be resumed and its undone effects redone.
        ``audit`` is appended in the same transaction, and only by the call that wrote the tombstone:
        the trail's ``condemned`` row names who condemned the run, never a later unwinder (the rule:
        ``tombstone.py``)."""

    @abc.abstractmethod
    def fork(self, source_run_id: str, step: int, new_run_id: str) -> None:
        """Copy the first ``step`` decisions and the records they produced into a new run, atomically.

        Raises CompensatedRunError if either run is condemned, RunExistsError if the new one exists,
        UnknownRunError if the source does not."""

    # -- planner decisions --------------------------------------------------------------------------
    @abc.abstractmethod
    def record_decision(self, run_id: str, step: int, payload: Any) -> Any:
        """Insert decision ``step`` (1-based) if absent; return the stored one (the first writer wins).

        Raises RunEndedError, writing nothing, for a new step of a run that has ended (finished or
        failed): nothing is decided after a run's end (a stored step is still returned)."""

    @abc.abstractmethod
    def list_decisions(self, run_id: str) -> list[Any]:
        """Payloads in step order."""


class RecordsPart(Clock, Protocol):
    """Tool records: claimed before ``execute``, settled by compare-and-set, under an execute lease."""

    @abc.abstractmethod
    def get_record(self, run_id: str, suffix: str) -> ToolRecord | None: ...

    @abc.abstractmethod
    def list_records(self, run_id: str, statuses: Sequence[RecordStatus] | None = None) -> list[ToolRecord]:
        """In execution order (sequence number)."""

    @abc.abstractmethod
    def waiting_records(self, *, limit: int = 500) -> list[ToolRecord]:
        """Across runs, the records that wait for a person (the inbox), least recently updated first,
        at most ``limit`` (served by a partial index, migration 0006): ``suspended`` calls of runs not
        condemned, and ``running`` ones whose execute lease ran out (or that have none: nobody knows
        whether their effect happened) in runs whose unwind has not completed. What waits for nobody
        is left out by the read itself, before the limit: rows nobody waits for must not fill it."""

    @abc.abstractmethod
    def claim_record(
        self,
        run_id: str,
        new: NewRecord,
        *,
        gated: bool,
        durable: bool = False,
        owner: str | None = None,
        ttl: float = 30.0,
    ) -> ToolRecord | None:
        """Insert a ``running`` record if absent, with the next sequence number; return it, or None if
        one already exists. With ``gated``, the tombstone check and the insert are one atomic step:
        raises CompensatedRunError (writing nothing) if the run is condemned. Gated or not, a run
        that has ended (finished or failed) accepts no new call, checked in the same atomic step:
        RunEndedError, writing nothing. With ``durable``, the
        claim is on stable storage when this returns (a side-effecting call that is not idempotent:
        after a power loss it must still read as interrupted, never as not started). ``owner`` and
        ``ttl`` start the execute lease (see ``renew_execution``)."""

    @abc.abstractmethod
    def record_in_transaction(
        self,
        run_id: str,
        new: NewRecord,
        effect: Callable[[Any], Any],
        *,
        expected: RecordStatus | None = None,
        attempts: int | None = None,
    ) -> ToolRecord | None:
        """Claim, execute and settle a call in one transaction: the tombstone gate (refusing a
        condemned or ended run as ``claim_record`` does), then ``effect(connection)`` (the DBAPI
        connection of this transaction, or None for a journal that has none), then the record written
        ``succeeded`` with what ``effect`` returned. If ``effect`` raises, nothing is written (its own
        writes roll back too) and the exception propagates. Without ``expected`` the record is
        inserted (None if one exists); with it, a record in that status (and with those ``attempts``)
        is taken over (None if it moved on)."""

    @abc.abstractmethod
    def reclaim_record(
        self,
        run_id: str,
        suffix: str,
        expected: RecordStatus,
        *,
        gated: bool,
        durable: bool = False,
        owner: str | None = None,
        ttl: float = 30.0,
        attempts: int | None = None,
    ) -> ToolRecord | None:
        """Compare-and-set ``expected`` (failed or running) → ``running`` with attempts + 1, for a
        re-execution, under a new execute lease. None if the record moved on (with ``attempts``: also
        if its attempts are no longer those). Gated (and refused for an ended run) and durable as
        ``claim_record``."""

    @abc.abstractmethod
    def complete_record(
        self,
        run_id: str,
        suffix: str,
        status: RecordStatus,
        *,
        output: Any = None,
        error: str | None = None,
        owner: str | None = None,
        traceparent: str | None = None,
    ) -> ToolRecord | None:
        """Compare-and-set ``running`` → succeeded/failed. None if the record was not running, or (with
        ``owner``) if another process took the call over: its outcome stands, this one is not written.
        ``traceparent`` (the execute's span, when traced) is written with the outcome.

        If the run is condemned by now, its unwind is reopened (pending, due at once, epoch + 1),
        whether or not this outcome was written: an unwind that read the record earlier judged a
        call in flight, and the effect that has now landed must still be undone."""

    @abc.abstractmethod
    def renew_execution(self, run_id: str, suffix: str, owner: str, ttl: float) -> bool:
        """Extend the execute lease while ``execute`` runs; False once the call is not ``owner``'s."""

    @abc.abstractmethod
    def resolve_record(
        self, run_id: str, suffix: str, expected: RecordStatus, output: Any
    ) -> ToolRecord | None:
        """Compare-and-set ``expected`` → succeeded with ``output``, when ``recover`` says it happened."""


class AuditPart(Clock, Protocol):
    """Approvals (a person's word on a suspended call or a gated compensation) and the audit trail."""

    @abc.abstractmethod
    def decide_call(
        self, run_id: str, suffix: str, decision: RecordStatus, *, error: str | None, audit: NewAudit
    ) -> ToolRecord | None:
        """A person's word on a suspended call: compare-and-set ``suspended`` → ``decision`` (approved
        or denied, with ``error`` for a denial) and append ``audit``, in one transaction behind the
        run's gate (the statement a tool claim takes), so it is ordered against the tombstone and the
        run's end: raises CompensatedRunError, writing nothing, if the run is condemned, and
        RunEndedError if it has ended (finished or failed). None if the record was not suspended
        (nothing written)."""

    @abc.abstractmethod
    def decide_compensation(self, gate: CompensationGate, audit: NewAudit) -> tuple[CompensationGate, bool]:
        """Record a decision on an approval-gated compensation if none is recorded (insert-if-absent:
        of two racing approvers one wins) and, for the winner only, append ``audit`` and make a run
        halted at the gate (``awaiting``) due for the sweeper, all in one transaction. Returns the
        stored decision and whether this call wrote it."""

    @abc.abstractmethod
    def get_gates(
        self, origin_and_suffixes: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CompensationGate]:
        """Decisions on compensation gates, for many steps in one read."""

    @abc.abstractmethod
    def append_audit(self, entry: NewAudit) -> bool:
        """Append a row (insert-if-absent on ``event_key`` when set); False if that event was there.

        Raises InvalidInputError, writing nothing, for a ``condemned`` row: that row is written only
        by ``condemn``, in the tombstone's own transaction (``tombstone.check_not_condemned_row``)."""

    @abc.abstractmethod
    def read_audit(self, run_id: str) -> list[AuditRecord]:
        """The run's trail, oldest first."""

    @abc.abstractmethod
    def queued_unwinds(self, since: float, *, limit: int = 500) -> list[AuditRecord]:
        """``unwind-queued`` rows of every run written at or after ``since`` (journal clock) whose
        task has not begun an unwind (no unwind of that id), oldest first: requests no worker took."""


class SharedPart(Clock, Protocol):
    """Cross-run shared executions: one execution for identical calls of several runs in a window."""

    @abc.abstractmethod
    def latest_shared(self, key: str) -> SharedAction | None:
        """The newest generation of shared execution ``key``, or None."""

    @abc.abstractmethod
    def get_shared(self, shared_id: str) -> SharedAction | None: ...

    @abc.abstractmethod
    def insert_shared(
        self,
        key: str,
        generation: int,
        tool_name: str,
        input: Any,
        run_id: str,
        window_s: float,
        *,
        gated_run: str | None = None,
    ) -> SharedAction | None:
        """Insert generation ``generation`` of ``key`` as ``running`` if absent (its window starts now,
        by the journal's clock); None if another writer made it first.

        With ``gated_run``, that run's gate is taken in the same atomic step, as a gated
        ``claim_record`` takes it: CompensatedRunError if the run is condemned, RunEndedError if it
        has ended, nothing written. (A shared execution is in no run's unwind: one that started
        after its run's tombstone would never be undone.)"""

    @abc.abstractmethod
    def settle_shared(
        self,
        shared_id: str,
        expected: SharedStatus,
        status: SharedStatus,
        *,
        output: Any = None,
        error: str | None = None,
        reclaim: bool = False,
        gated_run: str | None = None,
    ) -> SharedAction | None:
        """Compare-and-set ``expected`` → ``status`` (with ``reclaim``: → running, attempts + 1, for a
        re-execution). None if the shared execution moved on. ``gated_run`` as ``insert_shared``:
        a re-execution is a claim, behind the gate of the run that makes it."""


class ClaimsPart(Clock, Protocol):
    """Compensation claims: the journal's truth about who undoes a step, under a lease."""

    @abc.abstractmethod
    def get_claim(self, origin_run_id: str, suffix: str) -> CompensationClaim | None: ...

    @abc.abstractmethod
    def get_claims(
        self, origin_and_suffixes: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CompensationClaim]:
        """Claims for many steps in one read."""

    @abc.abstractmethod
    def claim_compensation(
        self,
        origin_run_id: str,
        suffix: str,
        *,
        via_run_id: str,
        owner: str,
        ttl: float,
        idempotency_key: str,
    ) -> ClaimAttempt:
        """Compare-and-set: take the step if nobody has, its last attempt failed, or its lease expired."""

    @abc.abstractmethod
    def renew_claim(self, origin_run_id: str, suffix: str, owner: str, ttl: float) -> bool:
        """Extend the lease while the hook runs; False once another owner has it."""

    @abc.abstractmethod
    def finish_claim(
        self, origin_run_id: str, suffix: str, owner: str, status: ClaimStatus, error: str | None = None
    ) -> bool:
        """Write the outcome only while still the owner: a holder that lost its lease writes nothing."""

    def lease_left(self, claim: CompensationClaim) -> float:
        """Seconds until ``claim``'s lease lapses (0 or less: lapsed), judged as ``claim_compensation``
        judges it: on the clock a backend keeps leases on, which a worker's stepped wall clock is not."""
        return claim.lease_expires_at - self.now()


class UnwindsPart(Clock, Protocol):
    """Unwind bookkeeping: the sweeper's state per run, and the distributed unwinds (the Celery
    executor's worklists and one entry per step)."""

    @abc.abstractmethod
    def set_unwind_state(
        self,
        run_id: str,
        state: UnwindState,
        *,
        note: str | None = None,
        next_at: float | None = None,
        count_attempt: bool = False,
        epoch: int | None = None,
        audit: NewAudit | None = None,
    ) -> None:
        """With ``epoch``, only if the run's unwind epoch is still that (no outcome landed since).

        ``audit`` is appended in the same transaction (insert-if-absent on its ``event_key``, and
        never a ``condemned`` row, as ``append_audit``), and also when the state write is skipped (an unknown run, a moved epoch):
        the trail records the unwind either way, in one commit instead of two."""

    @abc.abstractmethod
    def runs_to_sweep(
        self, now: float, *, limit: int = 100, unreadable: list[MalformedRecordError] | None = None
    ) -> list[RunInfo]:
        """Condemned runs whose unwind is pending or incomplete and due (``unwind_next_at <= now``),
        and those whose unwind state this code does not know (they are read, never left out).

        A due run whose row cannot be read fails the read closed (MalformedRecordError naming the
        run and the bad value). With ``unreadable``, each such error is appended there instead and
        the readable runs are returned: one bad row must not stop every other run's re-drive (the
        sweeper flags it for a person)."""

    @abc.abstractmethod
    def insert_unwind(
        self,
        unwind_id: str,
        run_id: str,
        *,
        dry_run: bool,
        suffixes: Sequence[str],
        actor: str = "",
        reason: str = "",
        via: str = "worker",
        run_epoch: int | None = None,
        groups: GroupPlan | None = None,
    ) -> UnwindInfo:
        """Insert the unwind if absent; return the stored one (a redelivered coordinator keeps the first).

        ``Journal.record_unwind`` is this and the sweeper's hold (one commit where a backend can)."""

    @abc.abstractmethod
    def get_unwind(self, unwind_id: str) -> UnwindInfo | None: ...

    @abc.abstractmethod
    def list_unwinds(self, run_id: str, *, limit: int = 20) -> list[UnwindInfo]:
        """The run's distributed unwinds, newest first."""

    @abc.abstractmethod
    def record_unwind_entry(self, unwind_id: str, position: int, entry: dict[str, Any]) -> dict[str, Any]:
        """Insert the entry of step ``position`` (0-based) if absent; return the stored one (first wins)."""

    @abc.abstractmethod
    def list_unwind_entries(self, unwind_id: str) -> dict[int, dict[str, Any]]:
        """The entries written so far, by position."""

    # -- lost workers -------------------------------------------------------------------------------
    @abc.abstractmethod
    def count_redelivery(self, task_id: str) -> int:
        """Count one more redelivery of task ``task_id``'s message (it came back after the worker
        process running it was lost); return how many it has had, 1 for the first.

        On stable storage when this returns: the count must survive the very crash it counts, or a
        message that kills every worker running it would come back forever."""

    @abc.abstractmethod
    def forget_redeliveries(self, task_id: str) -> None:
        """The task ended (any way but its worker being lost): its count goes."""


class RetentionPart(Clock, Protocol):
    """Retention: the runs nothing can still need, removed in bounded batches, each leaving a stub
    (the rule: ``journal/retention.py``)."""

    @abc.abstractmethod
    def prunable_runs(
        self, before: float, *, limit: int = 100, after: tuple[float, str] | None = None
    ) -> list[RunInfo]:
        """Runs the rule allows pruning, last updated before ``before``, least recently updated first,
        starting strictly after ``after`` (an ``(updated_at, run_id)`` key), at most ``limit``."""

    @abc.abstractmethod
    def count_prunable(self, before: float) -> int:
        """How many runs ``prune_runs`` would remove now with this cut-off."""

    @abc.abstractmethod
    def prune_runs(
        self,
        before: float,
        *,
        limit: int = 500,
        after: tuple[float, str] | None = None,
        archive: Archive | None = None,
    ) -> list[RunInfo]:
        """Prune at most ``limit`` runs (as ``prunable_runs`` chooses them) in one transaction; return
        their stubs, least recently updated first. ``archive`` is handed what is removed (each run's
        row and its rows of every table) before anything is deleted, in the transaction: if it raises,
        nothing is pruned. Each run is checked again as it is pruned, so one condemned or given a new
        call meanwhile is left alone."""

    @abc.abstractmethod
    def journal_size(self) -> JournalSize:
        """How many runs the journal holds (and pruned stubs), and its least recently updated run."""
