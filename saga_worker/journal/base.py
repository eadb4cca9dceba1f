"""The journal interface every backend implements (memory, SQLite, PostgreSQL).

Every write is idempotent by construction: inserts are insert-if-absent, updates are
compare-and-set on the state they expect, so a retried or duplicated message cannot corrupt state.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import InvalidInputError, MalformedRecordError
from .records import (
    AuditAction,
    AuditRecord,
    ClaimAttempt,
    ClaimStatus,
    CompensationClaim,
    CompensationGate,
    NewAudit,
    NewRecord,
    RecordStatus,
    RunInfo,
    RunQuery,
    RunStatus,
    SharedAction,
    SharedStatus,
    StepFinish,
    StepView,
    ToolRecord,
    UnwindInfo,
    UnwindState,
    WorklistView,
    condemned_by,
)

_GUARDS_LOCK = threading.Lock()


def check_not_condemned_row(entry: NewAudit | None) -> None:
    """Refuse a ``condemned`` audit row anywhere but in ``Journal.condemn``.

    The trail's first ``condemned`` row is who condemned the run (``condemned_by``, the report's
    ``condemned_by``): written apart from the tombstone, before it, it would name whoever wrote it."""
    if entry is not None and entry.action is AuditAction.CONDEMNED:
        raise InvalidInputError(
            f"run {entry.run_id!r}: a 'condemned' audit row is written only with the tombstone itself "
            "(Journal.condemn); nothing was written",
            run_id=entry.run_id,
        )


class Journal(abc.ABC):
    """What the run engine and the compensation engine need from storage, and nothing more."""

    url: str = ""

    # -- runs -------------------------------------------------------------------------------------
    @abc.abstractmethod
    def start_run(self, run_id: str, prompt: str) -> tuple[RunInfo, bool]:
        """Create the run if absent; return it and whether it was created.

        Raises CompensatedRunError, writing nothing, if the run is condemned."""

    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunInfo | None: ...

    @abc.abstractmethod
    def list_runs(self, *, limit: int = 100, condemned_only: bool = False) -> list[RunInfo]:
        """Most recently updated first."""

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
        the trail's ``condemned`` row names who condemned the run, never a later unwinder."""

    # -- planner decisions --------------------------------------------------------------------------
    @abc.abstractmethod
    def record_decision(self, run_id: str, step: int, payload: Any) -> Any:
        """Insert decision ``step`` (1-based) if absent; return the stored one (the first writer wins).

        Raises RunEndedError, writing nothing, for a new step of a run that has ended (finished or
        failed): nothing is decided after a run's end (a stored step is still returned)."""

    @abc.abstractmethod
    def list_decisions(self, run_id: str) -> list[Any]:
        """Payloads in step order."""

    # -- tool records -------------------------------------------------------------------------------
    @abc.abstractmethod
    def get_record(self, run_id: str, suffix: str) -> ToolRecord | None: ...

    @abc.abstractmethod
    def list_records(self, run_id: str, statuses: Sequence[RecordStatus] | None = None) -> list[ToolRecord]:
        """In execution order (sequence number)."""

    @abc.abstractmethod
    def waiting_records(self, *, limit: int = 500) -> list[ToolRecord]:
        """Across runs, the records that may wait for a person (the inbox): ``suspended`` calls and
        ``running`` ones (an execute whose outcome was never recorded), least recently updated first,
        at most ``limit`` (served by a partial index, migration 0006)."""

    def read_worklist(self, run_id: str, statuses: Sequence[RecordStatus]) -> WorklistView:
        """The run, its records of ``statuses``, their claims and who condemned the run, read together
        (see ``WorklistView``)."""
        run = self.get_run(run_id)
        found = self.list_records(run_id, statuses)
        claims = self.get_claims([(r.origin_run_id, r.suffix) for r in found])
        who = condemned_by(self.read_audit(run_id)) if run is not None and run.condemned else (None, None)
        return WorklistView(run, found, claims, who)

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
    ) -> ToolRecord | None:
        """Compare-and-set ``running`` → succeeded/failed. None if the record was not running, or (with
        ``owner``) if another process took the call over: its outcome stands, this one is not written.

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

    @abc.abstractmethod
    def fork(self, source_run_id: str, step: int, new_run_id: str) -> None:
        """Copy the first ``step`` decisions and the records they produced into a new run, atomically.

        Raises CompensatedRunError if either run is condemned, RunExistsError if the new one exists,
        UnknownRunError if the source does not."""

    # -- approvals ------------------------------------------------------------------------------------
    @abc.abstractmethod
    def decide_call(
        self, run_id: str, suffix: str, decision: RecordStatus, *, error: str | None, audit: NewAudit
    ) -> ToolRecord | None:
        """A person's word on a suspended call: compare-and-set ``suspended`` → ``decision`` (approved
        or denied, with ``error`` for a denial) and append ``audit``, in one transaction behind the
        run's gate (the statement a tool claim takes), so it is ordered against the tombstone: raises
        CompensatedRunError, writing nothing, if the run is condemned. None if the record was not
        suspended (nothing written)."""

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

    # -- the audit trail -------------------------------------------------------------------------------
    @abc.abstractmethod
    def append_audit(self, entry: NewAudit) -> bool:
        """Append a row (insert-if-absent on ``event_key`` when set); False if that event was there.

        Raises InvalidInputError, writing nothing, for a ``condemned`` row: that row is written only
        by ``condemn``, in the tombstone's own transaction (``check_not_condemned_row``)."""

    @abc.abstractmethod
    def read_audit(self, run_id: str) -> list[AuditRecord]:
        """The run's trail, oldest first."""

    # -- cross-run shared executions -------------------------------------------------------------------
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

    # -- compensation claims ------------------------------------------------------------------------
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

    # -- unwind bookkeeping (for the sweeper) -------------------------------------------------------
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

    def hold_sweep(self, run_id: str, grace: float, note: str) -> None:
        """Mark the unwind pending and not due for ``grace`` seconds (journal clock), keeping a later
        due time if the run already has one (the sweeper's backoff, when the sweeper re-drives it)."""
        run = self.get_run(run_id)
        due = self.now() + grace
        if run is not None and run.unwind_next_at is not None:
            due = max(due, run.unwind_next_at)
        self.set_unwind_state(run_id, UnwindState.PENDING, note=note, next_at=due)

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

    # -- distributed unwinds (the Celery executor's bookkeeping, saga_worker.executor) ---------------
    @abc.abstractmethod
    def record_unwind(
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
        hold_grace: float | None = None,
        hold_note: str = "",
    ) -> UnwindInfo:
        """Insert the unwind if absent; return the stored one (a redelivered coordinator keeps the first).

        With ``hold_grace``, and if the stored unwind is this run's and not a dry run, also
        ``hold_sweep(run_id, hold_grace, hold_note)`` in the same transaction (one commit, not two)."""

    @abc.abstractmethod
    def get_unwind(self, unwind_id: str) -> UnwindInfo | None: ...

    @abc.abstractmethod
    def list_unwinds(self, run_id: str, *, limit: int = 20) -> list[UnwindInfo]:
        """The run's distributed unwinds, newest first."""

    @abc.abstractmethod
    def record_unwind_entry(self, unwind_id: str, position: int, entry: dict[str, Any]) -> dict[str, Any]:
        """Insert the entry of step ``position`` (0-based) if absent; return the stored one (first wins)."""

    @abc.abstractmethod
    def finish_step(
        self,
        origin_run_id: str,
        suffix: str,
        owner: str,
        status: ClaimStatus,
        error: str | None = None,
        *,
        unwind_id: str,
        position: int,
        won: dict[str, Any],
        lost: dict[str, Any],
    ) -> StepFinish:
        """``finish_claim`` and ``record_unwind_entry`` in one transaction, for a step of a distributed
        unwind: the outcome written only while still the owner, then the entry of step ``position``
        inserted if absent: ``won`` if the outcome was written, else ``lost``. Returns whether the
        outcome was written and the stored entry (first wins, as ``record_unwind_entry``).

        Why together: the entry depends on whether the outcome's compare-and-set won, and written
        apart a crash between them leaves an outcome whose entry a redelivery must rebuild; together
        they also cost one commit instead of two."""

    @abc.abstractmethod
    def list_unwind_entries(self, unwind_id: str) -> dict[int, dict[str, Any]]:
        """The entries written so far, by position."""

    def read_step(self, unwind_id: str, run_id: str, suffix: str) -> StepView:
        """The unwind, this step's stored entry, its tool record and its claim (see ``StepView``)."""
        unwind = self.get_unwind(unwind_id)
        position = unwind.suffixes.index(suffix) if unwind and suffix in unwind.suffixes else None
        entries = {} if position is None else self.list_unwind_entries(unwind_id)
        entry = None if position is None else entries.get(position)
        previous = None if not position else entries.get(position - 1)
        record = self.get_record(run_id, suffix)
        claim = None if record is None else self.get_claim(record.origin_run_id, suffix)
        return StepView(unwind, position, entry, record, claim, previous)

    @abc.abstractmethod
    def now(self) -> float:
        """The journal's clock (the database's for PostgreSQL), so leases do not depend on a worker's clock."""

    # -- execution guards -----------------------------------------------------------------------------
    #: Does a free execution guard alone prove that nobody is executing the record? True where the
    #: guard dies only with its holder (a thread lock in memory, an open-file lock on a SQLite file).
    #: False where it could vanish with the holder alive (PostgreSQL's advisory lock, with a cut
    #: connection) or where other processes do not see it: then the record's execute lease must have
    #: lapsed too (see ``executor_gone``).
    guard_bound_to_process: bool = True

    def executor_gone(self, record: ToolRecord) -> bool:
        """Asked under the record's execution guard: can nobody still be executing this call, so that
        it may be probed with ``recover``, or executed again?

        A ``running`` record whose guard is free was left by a dead process where the guard is bound
        to its holder's process. Elsewhere (PostgreSQL) the executing process renews a lease on the
        record while ``execute`` runs, and only an expired lease says it is gone: a lock held on a
        database connection would vanish with the connection (a cut, a failover, a proxy timeout)
        while ``execute`` still runs, and a probe then could read "not done" just before the effect
        lands. A record written before leases existed (no lease) is judged by its guard alone."""
        if record.status is not RecordStatus.RUNNING or self.guard_bound_to_process:
            return True
        expires = record.exec_lease_expires_at
        return expires is None or expires <= self.now()

    @contextmanager
    def execution_guard(self, run_id: str, suffix: str, *, wait: float = 0.0) -> Iterator[bool]:
        """Hold the right to claim, probe or execute one tool record; yields False if a live holder has it.

        A ``running`` record alone cannot tell a call still executing in another process from one whose
        process died. The guard helps: it is held while ``execute`` runs and its holder's death releases
        it at once (an open-file lock next to a SQLite file, a thread lock in memory, a session
        advisory lock on PostgreSQL, which a cut connection releases too). Whether a free guard is
        enough is ``executor_gone``'s to say. ``wait`` is how long to keep trying while another holder
        has it."""
        deadline = time.monotonic() + wait
        token = self._try_guard(run_id, suffix)
        while token is None and time.monotonic() < deadline:
            time.sleep(0.02)
            token = self._try_guard(run_id, suffix)
        if token is None:
            yield False
            return
        try:
            yield True
        finally:
            self._release_guard(token)

    def _try_guard(self, run_id: str, suffix: str) -> object | None:
        """Take the guard without waiting: a token for ``_release_guard``, or None if it is held.

        This default is in-process only (threads of one process sharing this journal object)."""
        with _GUARDS_LOCK:
            held: set[tuple[str, str]] = self.__dict__.setdefault("_execution_guards", set())
            if (run_id, suffix) in held:
                return None
            held.add((run_id, suffix))
            return (run_id, suffix)

    def _release_guard(self, token: object) -> None:
        with _GUARDS_LOCK:
            self.__dict__.setdefault("_execution_guards", set()).discard(token)

    def close(self) -> None:  # noqa: B027 - optional: journals without connections need nothing
        """Release connections. The journal is unusable afterwards."""

    def reset_after_fork(self) -> None:  # noqa: B027 - optional: journals without connections need nothing
        """In a forked child: forget the connections inherited from the parent without closing them
        (they are the parent's, and closing a shared socket would break its session). Call it before
        the child uses or drops the journal; the journal opens fresh connections if used again."""

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
