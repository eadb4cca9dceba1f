"""The journal interface every backend implements (memory, SQLite, PostgreSQL): its parts by area
(``parts.py``) and what spans them.

A new backend implements the parts' abstract methods; the methods here have defaults in terms of
those, which a backend overrides only to save round trips or commits (as the SQL journal does for
``finish_step``, ``record_unwind``'s hold, ``hold_sweep``, ``read_worklist`` and ``read_step``).
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..core import faults
from ..core.keys import compensate_key
from .parts import AuditPart, ClaimsPart, RecordsPart, RetentionPart, RunsPart, SharedPart, UnwindsPart
from .records import (
    ClaimAttempt,
    ClaimStatus,
    FinishedClaim,
    FirstClaim,
    GroupPlan,
    NewAudit,
    RecordStatus,
    ReportView,
    StepClaim,
    StepFinish,
    StepView,
    ToolRecord,
    UnwindEnd,
    UnwindInfo,
    UnwindState,
    WorklistView,
    condemned_by,
)
from .tombstone import condemn_then_read

_GUARDS_LOCK = threading.Lock()


class Journal(RunsPart, RecordsPart, AuditPart, SharedPart, ClaimsPart, UnwindsPart, RetentionPart, abc.ABC):
    """What the run engine and the compensation engine need from storage, and nothing more."""

    url: str = ""

    # -- reads and writes across parts (defaults in terms of the parts' methods) -----------------
    def read_worklist(self, run_id: str, statuses: Sequence[RecordStatus]) -> WorklistView:
        """The run, its records of ``statuses``, their claims and who condemned the run, read together
        (see ``WorklistView``)."""
        run = self.get_run(run_id)
        found = self.list_records(run_id, statuses)
        claims = self.get_claims([(r.origin_run_id, r.suffix) for r in found])
        who = condemned_by(self.read_audit(run_id)) if run is not None and run.condemned else (None, None)
        return WorklistView(run, found, claims, who)

    def read_report(
        self,
        unwind_id: str,
        run_id: str,
        statuses: Sequence[RecordStatus],
        *,
        unwind: UnwindInfo | None = None,
    ) -> ReportView:
        """The unwind (``unwind`` when the caller read it already: not read again), its stored entries,
        the run, its records of ``statuses`` and who condemned it, read together: what the report of
        a distributed unwind is assembled from. No claims (``worklist.claims`` is empty): the entries
        say what each step did."""
        if unwind is None:
            unwind = self.get_unwind(unwind_id)
        entries = self.list_unwind_entries(unwind_id)
        run = self.get_run(run_id)
        found = self.list_records(run_id, statuses)
        who = condemned_by(self.read_audit(run_id)) if run is not None and run.condemned else (None, None)
        return ReportView(unwind, entries, WorklistView(run, found, {}, who))

    def condemn_and_read(
        self, run_id: str, statuses: Sequence[RecordStatus], *, audit: NewAudit | None = None
    ) -> WorklistView:
        """``condemn`` (durable before this returns), then ``read_worklist``: what an unwind does first.
        A backend where a transaction costs no round trip reads in the tombstone's transaction (SQLite:
        one commit, not two); the rows are parsed after the commit either way, so a malformed row fails
        with the tombstone standing (the rule: ``tombstone.py``)."""
        return condemn_then_read(self, run_id, statuses, audit=audit)

    def condemn_read_and_claim(
        self,
        run_id: str,
        statuses: Sequence[RecordStatus],
        *,
        audit: NewAudit | None = None,
        first: FirstClaim,
    ) -> tuple[WorklistView, ClaimAttempt | None]:
        """``condemn_and_read``, then the claim of the first step to undo (``first.target``), with its
        key: one commit where a backend can (the in-process unwind's first claim rides in the
        tombstone's commit, so both are committed before the first hook). The attempt is None when
        no claim was made: the first step is not one ``first`` names, or its rows could not be
        parsed (the SQL journal also folds none into a tombstone this call did not write: a run
        condemned before, or one never seen).

        The tombstone never depends on the claim: a claim that finds the step busy (or already
        compensated) commits the tombstone all the same (SQLite: the claim in a savepoint; PostgreSQL:
        one statement whose claim writes nothing then). Fault point ``after_first_claim`` (the
        claimed step's key) follows the commit, before anything else. This default commits them one
        after the other."""
        view = self.condemn_and_read(run_id, statuses, audit=audit)
        target = first.target(view.records)
        if target is None:
            return view, None
        key = compensate_key(target.origin_run_id, target.suffix)
        got = self.claim_compensation(
            target.origin_run_id,
            target.suffix,
            via_run_id=first.via_run_id,
            owner=first.owner,
            ttl=first.ttl,
            idempotency_key=key,
        )
        faults.point("after_first_claim", key)
        return view, got

    def hold_sweep(self, run_id: str, grace: float, note: str) -> None:
        """Mark the unwind pending and not due for ``grace`` seconds (journal clock), keeping a later
        due time if the run already has one (the sweeper's backoff, when the sweeper re-drives it)."""
        run = self.get_run(run_id)
        due = self.now() + grace
        if run is not None and run.unwind_next_at is not None:
            due = max(due, run.unwind_next_at)
        self.set_unwind_state(run_id, UnwindState.PENDING, note=note, next_at=due)

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
        groups: GroupPlan | None = None,
    ) -> UnwindInfo:
        """``insert_unwind``, and with ``hold_grace``, if the stored unwind is this run's and not a dry
        run, ``hold_sweep(run_id, hold_grace, hold_note)``: in one transaction where a backend can (one
        commit, not two; the SQL journal does)."""
        stored = self.insert_unwind(
            unwind_id,
            run_id,
            dry_run=dry_run,
            suffixes=suffixes,
            actor=actor,
            reason=reason,
            via=via,
            run_epoch=run_epoch,
            groups=groups,
        )
        if hold_grace is not None and stored.run_id == run_id and not stored.dry_run:
            self.hold_sweep(run_id, hold_grace, hold_note)
        return stored

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
        end: UnwindEnd | None = None,
    ) -> StepFinish:
        """``finish_claim`` and ``record_unwind_entry`` in one transaction, for a step of a distributed
        unwind: the outcome written only while still the owner, then the entry of step ``position``
        inserted if absent: ``won`` if the outcome was written, else ``lost``. Returns whether the
        outcome was written and the stored entry (first wins, as ``record_unwind_entry``).

        Why together: the entry depends on whether the outcome's compare-and-set won, and written
        apart a crash between them leaves an outcome whose entry a redelivery must rebuild; together
        they also cost one commit instead of two. This default writes them one after the other; a
        backend makes them one transaction (the memory journal under its lock, SQL in one statement).

        With ``end`` (the last step of an unwind whose report, with ``won``, is complete): the run's
        unwind state and the ``unwound`` row too, only if the outcome was written and the entry stored
        is ``won`` (``StepFinish.ended``); else nothing more, and the report is assembled as usual."""
        written = self.finish_claim(origin_run_id, suffix, owner, status, error)
        stored = self.record_unwind_entry(unwind_id, position, won if written else lost)
        if end is None or not written or stored != won:
            return StepFinish(written, stored)
        audit = end.audit
        self.set_unwind_state(audit.run_id, UnwindState.COMPLETE, epoch=end.epoch, audit=audit)
        return StepFinish(written, stored, ended=True)

    def finish_and_claim(
        self,
        finished: FinishedClaim,
        origin_run_id: str,
        suffix: str,
        *,
        via_run_id: str,
        owner: str,
        ttl: float,
        idempotency_key: str,
    ) -> ClaimAttempt | None:
        """``finish_claim(finished)``, then, if its outcome was written, ``claim_compensation`` of the
        next step: one commit where a backend can (the in-process unwind's n+1 commits). None when
        the outcome was not written (``finished.owner`` lost the claim): nothing is claimed then.

        The claim is the second part of the commit and cannot cost the first: a claim that finds the
        step busy (or already compensated) still commits the outcome (SQLite: the claim runs in a
        savepoint, and an error in it is rolled back to there, the outcome committed, then the claim
        tried once more on its own). Fault point ``before_next_claim`` (the finished step's key) is
        between the two: in one transaction, a crash there leaves neither. This default writes them
        one after the other."""
        written = self.finish_claim(
            finished.origin_run_id, finished.suffix, finished.owner, finished.status, finished.error
        )
        if not written:
            return None
        faults.point("before_next_claim", compensate_key(finished.origin_run_id, finished.suffix))
        return self.claim_compensation(
            origin_run_id,
            suffix,
            via_run_id=via_run_id,
            owner=owner,
            ttl=ttl,
            idempotency_key=idempotency_key,
        )

    def finish_last_step(
        self, finished: FinishedClaim, run_id: str, *, epoch: int | None, audit: NewAudit
    ) -> bool:
        """The last step's outcome (``finish_claim(finished)``) and, if it was written, the run's
        unwind state ``complete`` with its ``unwound`` audit row (``set_unwind_state``): one commit
        where a backend can (the in-process unwind ends with it). False when the outcome was not
        written (``finished.owner`` lost the claim): nothing is written then. This default writes
        them one after the other."""
        written = self.finish_claim(
            finished.origin_run_id, finished.suffix, finished.owner, finished.status, finished.error
        )
        if written:
            self.set_unwind_state(run_id, UnwindState.COMPLETE, epoch=epoch, audit=audit)
        return written

    def read_step(self, unwind_id: str, run_id: str, suffix: str, claim: StepClaim | None = None) -> StepView:
        """The unwind, this step's stored entry, its tool record and its claim (see ``StepView``).
        ``claim`` (``StepClaim``) is taken by the read where a journal folds the two into one
        statement; this default takes none (``StepView.taken`` stays None)."""
        unwind = self.get_unwind(unwind_id)
        position = unwind.suffixes.index(suffix) if unwind and suffix in unwind.suffixes else None
        entries = {} if position is None else self.list_unwind_entries(unwind_id)
        entry = None if position is None else entries.get(position)
        previous = None if not position else entries.get(position - 1)
        record = self.get_record(run_id, suffix)
        held = None if record is None else self.get_claim(record.origin_run_id, suffix)
        return StepView(unwind, position, entry, record, held, previous)

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
