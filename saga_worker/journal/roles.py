"""The journal as each of its three kinds of consumer sees it: a role lists exactly the methods
its consumers call, so a module typed against a role can reach no more of the journal than its job.

- ``UnwindJournal``: the compensation engine, the unwind chain, the sweeper, the redelivery count.
- ``RunJournal``: a run's calls, its planner loop, a ``saga()`` block, the agent adapters.
- ``OperatorJournal``: what an operator reads and decides: actions, views, approvals, the inbox.

The parts (``parts.py``) are the backend writer's checklist, one area each; the roles are the
consumer's view across areas. A role re-declares its methods instead of inheriting parts, since a
part brings all of its area (``RunsPart`` would hand ``condemn`` and ``fork`` to the unwind). What
two roles share is declared once below, in a small protocol both compose. Every ``Journal`` plays
every role (checked by mypy at the end of this module); tests/journal/test_roles.py pins each
role's methods, so a role cannot grow without that test saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import MalformedRecordError
from .parts import Clock
from .records import (
    AuditRecord,
    ClaimAttempt,
    ClaimStatus,
    CompensationClaim,
    CompensationGate,
    FinishedClaim,
    FirstClaim,
    GroupPlan,
    JournalSize,
    NewAudit,
    NewRecord,
    RecordStatus,
    ReportView,
    RunInfo,
    RunQuery,
    RunStatus,
    SharedAction,
    SharedStatus,
    StepClaim,
    StepFinish,
    StepView,
    ToolRecord,
    UnwindEnd,
    UnwindInfo,
    UnwindState,
    WorklistView,
)

if TYPE_CHECKING:
    from .base import Journal


# -- what more than one role reads or writes (each declared once) -------------------------------
class _RunAndRecord(Clock, Protocol):
    """Every role: a run and one of its tool records."""

    def get_run(self, run_id: str) -> RunInfo | None: ...

    def get_record(self, run_id: str, suffix: str) -> ToolRecord | None: ...


class _History(Protocol):
    """A run's decisions and records as listed (runs, operators)."""

    def list_decisions(self, run_id: str) -> list[Any]: ...

    def list_records(
        self, run_id: str, statuses: Sequence[RecordStatus] | None = None
    ) -> list[ToolRecord]: ...


class _Guard(Protocol):
    """The execution guard on one tool record (runs execute under it, an unwind probes under it)."""

    def execution_guard(
        self, run_id: str, suffix: str, *, wait: float = 0.0
    ) -> AbstractContextManager[bool]: ...

    def executor_gone(self, record: ToolRecord) -> bool: ...


class _Trail(Protocol):
    """Compensation gates and the audit trail (unwinds, operators)."""

    def get_gates(
        self, origin_and_suffixes: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CompensationGate]: ...

    def append_audit(self, entry: NewAudit) -> bool: ...

    def read_audit(self, run_id: str) -> list[AuditRecord]: ...


class _UnwindProgress(Protocol):
    """An unwind's claims, the run's unwinds and the sweeper's hold (unwinds, operators)."""

    def get_claims(
        self, origin_and_suffixes: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CompensationClaim]: ...

    def list_unwinds(self, run_id: str, *, limit: int = 20) -> list[UnwindInfo]: ...

    def hold_sweep(self, run_id: str, grace: float, note: str) -> None: ...


# -- the roles ----------------------------------------------------------------------------------
class UnwindJournal(_RunAndRecord, _Guard, _Trail, _UnwindProgress, Protocol):
    """What an unwind needs: the tombstone and the worklist, each step's claim and outcome, the
    distributed unwind's bookkeeping, the sweeper's state and the redelivery count."""

    def condemn_and_read(
        self, run_id: str, statuses: Sequence[RecordStatus], *, audit: NewAudit | None = None
    ) -> WorklistView: ...

    def condemn_read_and_claim(
        self,
        run_id: str,
        statuses: Sequence[RecordStatus],
        *,
        audit: NewAudit | None = None,
        first: FirstClaim,
    ) -> tuple[WorklistView, ClaimAttempt | None]: ...

    def read_worklist(self, run_id: str, statuses: Sequence[RecordStatus]) -> WorklistView: ...

    def read_report(
        self,
        unwind_id: str,
        run_id: str,
        statuses: Sequence[RecordStatus],
        *,
        unwind: UnwindInfo | None = None,
    ) -> ReportView: ...

    def read_step(
        self, unwind_id: str, run_id: str, suffix: str, claim: StepClaim | None = None
    ) -> StepView: ...

    def list_unwind_entries(self, unwind_id: str) -> dict[int, dict[str, Any]]: ...

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
    ) -> UnwindInfo: ...

    def record_unwind_entry(self, unwind_id: str, position: int, entry: dict[str, Any]) -> dict[str, Any]: ...

    def get_claim(self, origin_run_id: str, suffix: str) -> CompensationClaim | None: ...

    def claim_compensation(
        self,
        origin_run_id: str,
        suffix: str,
        *,
        via_run_id: str,
        owner: str,
        ttl: float,
        idempotency_key: str,
    ) -> ClaimAttempt: ...

    def renew_claim(self, origin_run_id: str, suffix: str, owner: str, ttl: float) -> bool: ...

    def finish_claim(
        self, origin_run_id: str, suffix: str, owner: str, status: ClaimStatus, error: str | None = None
    ) -> bool: ...

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
    ) -> StepFinish: ...

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
    ) -> ClaimAttempt | None: ...

    def finish_last_step(
        self, finished: FinishedClaim, run_id: str, *, epoch: int | None, audit: NewAudit
    ) -> bool: ...

    def lease_left(self, claim: CompensationClaim) -> float: ...

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
    ) -> None: ...

    def runs_to_sweep(
        self, now: float, *, limit: int = 100, unreadable: list[MalformedRecordError] | None = None
    ) -> list[RunInfo]: ...

    def count_redelivery(self, task_id: str) -> int: ...

    def forget_redeliveries(self, task_id: str) -> None: ...


class RunJournal(_RunAndRecord, _History, _Guard, Protocol):
    """What a run needs: the run and its decisions, each call's record from claim to outcome, and
    the cross-run shared executions."""

    def start_run(
        self, run_id: str, prompt: str, *, traceparent: str | None = None
    ) -> tuple[RunInfo, bool]: ...

    def end_run(self, run_id: str, status: RunStatus, text: str, error: str | None) -> RunInfo: ...

    def fork(self, source_run_id: str, step: int, new_run_id: str) -> None: ...

    def record_decision(self, run_id: str, step: int, payload: Any) -> Any: ...

    def claim_record(
        self,
        run_id: str,
        new: NewRecord,
        *,
        gated: bool,
        durable: bool = False,
        owner: str | None = None,
        ttl: float = 30.0,
    ) -> ToolRecord | None: ...

    def record_in_transaction(
        self,
        run_id: str,
        new: NewRecord,
        effect: Callable[[Any], Any],
        *,
        expected: RecordStatus | None = None,
        attempts: int | None = None,
    ) -> ToolRecord | None: ...

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
    ) -> ToolRecord | None: ...

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
    ) -> ToolRecord | None: ...

    def renew_execution(self, run_id: str, suffix: str, owner: str, ttl: float) -> bool: ...

    def resolve_record(
        self, run_id: str, suffix: str, expected: RecordStatus, output: Any
    ) -> ToolRecord | None: ...

    def latest_shared(self, key: str) -> SharedAction | None: ...

    def get_shared(self, shared_id: str) -> SharedAction | None: ...

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
    ) -> SharedAction | None: ...

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
    ) -> SharedAction | None: ...


class OperatorJournal(_RunAndRecord, _History, _Trail, _UnwindProgress, Protocol):
    """What an operator reads and decides: runs page by page, what waits for a person, the
    decisions on calls and compensations, and each unwind with its entries."""

    def page_runs(self, query: RunQuery) -> list[RunInfo]: ...

    def waiting_records(self, *, limit: int = 500) -> list[ToolRecord]: ...

    def queued_unwinds(self, since: float, *, limit: int = 500) -> list[AuditRecord]: ...

    def decide_call(
        self, run_id: str, suffix: str, decision: RecordStatus, *, error: str | None, audit: NewAudit
    ) -> ToolRecord | None: ...

    def decide_compensation(
        self, gate: CompensationGate, audit: NewAudit
    ) -> tuple[CompensationGate, bool]: ...

    def get_unwind(self, unwind_id: str) -> UnwindInfo | None: ...

    def list_unwind_entries(self, unwind_id: str) -> dict[int, dict[str, Any]]: ...

    def journal_size(self) -> JournalSize: ...


def _every_journal_plays_every_role(journal: Journal) -> tuple[UnwindJournal, RunJournal, OperatorJournal]:
    """Never called: mypy checks that a ``Journal`` (any backend) is each role."""
    return journal, journal, journal
