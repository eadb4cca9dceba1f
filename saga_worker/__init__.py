"""saga-worker: unwinds multi-step runs. Condemn first, compensate in reverse, report honestly."""

from typing import TYPE_CHECKING

from .compensation import (
    CompensationEntry,
    CompensationReport,
    CompensationStatus,
    assert_not_compensated,
    compensate_run,
    run_compensated,
)
from .contrib import django as _contrib_django  # noqa: F401 - adds Django's settings as a settings source
from .errors import (
    ApprovalError,
    CompensatedRunError,
    InvalidInputError,
    JournalError,
    JournalUnavailableError,
    MalformedRecordError,
    OpenTransactionError,
    ReplayMismatchError,
    RunEndedError,
    RunExistsError,
    RunPrunedError,
    SagaError,
    SideEffectRetryBlockedError,
    ToolFailedError,
    ToolsNotConfiguredError,
    UnknownRunError,
    UnknownToolError,
)
from .journal import Journal, MemoryJournal, open_journal
from .journal.records import AuditAction, AuditRecord, AuditVia, CompensationGate, GateDecision
from .operating.approvals import approve, approve_compensation, deny, deny_compensation, pending_calls
from .operating.audit import read_audit
from .recording.blocks import SagaRun, saga
from .recording.decorator import tool
from .recording.planning import CallResult, Finish, Planner, RunState, ToolCall, scripted
from .recording.runs import (
    PendingCall,
    RunEvent,
    RunResult,
    fork_run,
    resume_run,
    run_durable,
    stream_durable,
)
from .recording.tools import CallOptions, NoEffect, RecoverResult, RetryPolicy, Tool
from .version import __version__ as __version__

if TYPE_CHECKING:  # typed for checkers; at run time imported only when asked for (below)
    from .compensation.alerts import unwind_halted, unwind_needs_attention
    from .journal.sql import SqlJournal


def __getattr__(name: str) -> object:
    # SqlJournal pulls in SQLAlchemy; import it only when asked for. The alerts' signals are made on
    # first use (Celery's dispatcher is imported then, not with the package).
    if name == "SqlJournal":
        from .journal.sql import SqlJournal

        return SqlJournal
    if name in ("unwind_halted", "unwind_needs_attention"):
        from .compensation import alerts

        return alerts.signal(name)
    raise AttributeError(f"module 'saga_worker' has no attribute {name!r}")


__all__ = [
    # tools and runs
    "CallOptions",
    "CallResult",
    "Finish",
    "NoEffect",
    "Planner",
    "RecoverResult",
    "RetryPolicy",
    "RunEvent",
    "RunResult",
    "RunState",
    "Tool",
    "ToolCall",
    "fork_run",
    "resume_run",
    "run_durable",
    "scripted",
    "stream_durable",
    # adopting it from ordinary code (docs/reference/integration.md)
    "SagaRun",
    "saga",
    "tool",
    # journals
    "Journal",
    "MemoryJournal",
    "SqlJournal",
    "open_journal",
    # compensation
    "CompensationEntry",
    "CompensationReport",
    "CompensationStatus",
    "assert_not_compensated",
    "compensate_run",
    "run_compensated",
    # alerts: signals an app connects to (docs/reference/compensation.md, telling the operator)
    "unwind_halted",
    "unwind_needs_attention",
    # approvals and the audit trail
    "AuditAction",
    "AuditRecord",
    "AuditVia",
    "CompensationGate",
    "GateDecision",
    "PendingCall",
    "approve",
    "approve_compensation",
    "deny",
    "deny_compensation",
    "pending_calls",
    "read_audit",
    # errors
    "ApprovalError",
    "CompensatedRunError",
    "InvalidInputError",
    "JournalError",
    "JournalUnavailableError",
    "MalformedRecordError",
    "OpenTransactionError",
    "ReplayMismatchError",
    "RunEndedError",
    "RunExistsError",
    "RunPrunedError",
    "SagaError",
    "SideEffectRetryBlockedError",
    "ToolFailedError",
    "ToolsNotConfiguredError",
    "UnknownRunError",
    "UnknownToolError",
]
