"""Every error saga-worker raises descends from :class:`SagaError`.

Subclasses carry the ids involved in ``detail`` and build their message from them, so a log line
names exactly which run, tool or step was wrong. A subclass whose constructor takes ids rather than
the message keeps those ids as its ``args`` (``_rebuilds_from``): pickle and Celery's result backend
rebuild an exception as ``type(exc)(*exc.args)``, which must give the same error back, not one whose
message wraps the first one's.
"""

from __future__ import annotations

import time
from typing import Any


class SagaError(Exception):
    """Root of saga-worker's errors."""

    def __init__(self, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.detail: dict[str, Any] = detail

    def _rebuilds_from(self, *args: Any) -> None:
        """Keep the message as ``message`` and make ``args`` the constructor's own arguments."""
        self.message = str(self.args[0])
        self.args = args

    def __str__(self) -> str:
        message = self.__dict__.get("message")
        return message if isinstance(message, str) else super().__str__()


class CompensatedRunError(SagaError):
    """The run is condemned (its unwind has been asked for): it can never move forward again."""

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"run {run_id!r} is condemned (compensation was requested); it cannot run again", run_id=run_id
        )
        self._rebuilds_from(run_id)


class SideEffectRetryBlockedError(SagaError):
    """Executing a call again could repeat a side effect, and nothing says it is safe."""

    def __init__(self, run_id: str, tool_call_id: str, tool_name: str, reason: str) -> None:
        super().__init__(
            f"run {run_id!r}: call {tool_call_id!r} of tool {tool_name!r} may already have had its side "
            f"effect and will not be executed again: {reason}",
            run_id=run_id,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
        )
        self._rebuilds_from(run_id, tool_call_id, tool_name, reason)


class UnknownToolError(SagaError):
    """A planner asked for a tool that is not in ``tools``."""

    def __init__(self, run_id: str, tool_name: str, known: list[str]) -> None:
        super().__init__(
            f"run {run_id!r}: unknown tool {tool_name!r} (known tools: {', '.join(known) or 'none'})",
            run_id=run_id,
            tool_name=tool_name,
        )
        self._rebuilds_from(run_id, tool_name, known)


class InvalidInputError(SagaError, ValueError):
    """An argument cannot be used: it names what was wrong and why."""


class ToolsNotConfiguredError(InvalidInputError):
    """Something needs the tools whose hooks undo the steps, and none are configured.

    There is no fallback: a worker that loaded sample tools would answer a real step with a sample
    hook (a ``charge`` read ``compensated`` with no real refund)."""

    def __init__(self, where: str) -> None:
        super().__init__(
            f"{where}: no tools configured: set SAGA_TOOLS='package.module:attribute' (the mapping of tool "
            "name to Tool whose hooks undo your steps), or pass install(app, tools=...); saga-worker never "
            "falls back to sample tools (only `saga-worker demo` names its own)",
            where=where,
        )


class RunExistsError(SagaError):
    """A run with this id already exists (for example as the target of a fork)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} already exists", run_id=run_id)
        self._rebuilds_from(run_id)


class UnknownRunError(SagaError, LookupError):
    """The journal has never seen this run id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} is not in the journal", run_id=run_id)
        self._rebuilds_from(run_id)


class RunPrunedError(SagaError, LookupError):
    """Retention pruned the run: its journal is gone but a stub that keeps its id from ever running,
    resuming or being unwound again (a replay must never become a re-execution)."""

    def __init__(self, run_id: str, status: str, pruned_at: float) -> None:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(pruned_at))
        super().__init__(
            f"run {run_id!r} was pruned from the journal at {when} (it had {status}); its calls and "
            "decisions are gone, so it cannot run, resume or be unwound again: use a new run id",
            run_id=run_id,
            status=status,
            pruned_at=pruned_at,
        )
        self._rebuilds_from(run_id, status, pruned_at)


class JournalError(SagaError):
    """The journal cannot be opened or used (bad URL, missing driver, schema not migrated)."""


class JournalUnavailableError(JournalError):
    """The journal's storage refuses work for now: a full or failing disk, a read-only database (a
    standby), a connection the server keeps closing. The message says which and what to do; once
    that is fixed the same work succeeds (every write is idempotent), so the saga tasks retry it."""


class MalformedRecordError(SagaError):
    """A journal row cannot be read back (corrupt JSON, unknown status)."""

    def __init__(self, run_id: str, what: str, reason: str) -> None:
        super().__init__(
            f"run {run_id!r}: malformed journal record {what}: {reason}", run_id=run_id, what=what
        )
        self._rebuilds_from(run_id, what, reason)


class ToolFailedError(SagaError):
    """A tool called from a ``saga()`` block raised: its record is ``failed`` (docs/reference/integration.md)."""

    def __init__(self, run_id: str, tool_call_id: str, tool_name: str, error: str) -> None:
        super().__init__(
            f"run {run_id!r}: tool {tool_name!r} (call {tool_call_id}) failed: {error}",
            run_id=run_id,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            error=error,
        )
        self._rebuilds_from(run_id, tool_call_id, tool_name, error)
        self.run_id, self.tool_call_id, self.tool_name, self.error = run_id, tool_call_id, tool_name, error


class ReplayMismatchError(InvalidInputError):
    """A run entered again asks, for a call the journal already holds, another tool or another input.

    Replaying the journaled outcome would hand back the result of a different call, and executing
    the new one would run a side effect the journal cannot place: neither happens."""

    def __init__(
        self, run_id: str, tool_call_id: str, journaled: tuple[str, str], asked: tuple[str, str], hint: str
    ) -> None:
        super().__init__(
            f"run {run_id!r}: call {tool_call_id!r} is journaled as {journaled[0]}({journaled[1]}) but is now "
            f"asked as {asked[0]}({asked[1]}); nothing was executed or replayed: {hint}",
            run_id=run_id,
            tool_call_id=tool_call_id,
            journaled_tool=journaled[0],
            asked_tool=asked[0],
        )
        self._rebuilds_from(run_id, tool_call_id, journaled, asked, hint)


class OutOfLineCallError(ReplayMismatchError):
    """A new call whose position the journal left free below a call it holds from later in the run:
    the run's calls do not line up with the journal's, so the call is not executed there (executing
    it could repeat an effect the journal holds under another position)."""

    def __init__(
        self, run_id: str, tool_call_id: str, asked: tuple[str, str], later: tuple[str, str, str]
    ) -> None:
        InvalidInputError.__init__(
            self,
            f"run {run_id!r}: call {tool_call_id!r}, {asked[0]}({asked[1]}), is not in the journal, which "
            f"already holds {later[0]!r}, {later[1]}({later[2]}), from later in the run; nothing was "
            "executed or replayed: the run's calls do not line up with the journal's (a call that took a "
            "position when the run was journaled takes none now, or the other way round), and executing "
            "it here could repeat an effect the journal holds under another position",
            run_id=run_id,
            tool_call_id=tool_call_id,
            journaled_tool=later[1],
            asked_tool=asked[0],
        )
        self._rebuilds_from(run_id, tool_call_id, asked, later)


class RunEndedError(InvalidInputError):
    """The run has ended (finished or failed): it accepts no new call and no new decision.

    Checked in the same atomic step as a call's claim, so a call that races the run's end either
    was claimed before it (and is the run's) or is refused here with nothing executed."""

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(
            f"run {run_id!r} has ended ({status}); it accepts no new call: nothing was executed or written",
            run_id=run_id,
            status=status,
        )


class ApprovalError(SagaError):
    """An approval or denial that cannot apply: no such call or step, or it was decided otherwise."""

    def __init__(self, run_id: str, target: str, reason: str) -> None:
        super().__init__(
            f"run {run_id!r}: cannot decide on {target!r}: {reason}", run_id=run_id, target=target
        )
        self._rebuilds_from(run_id, target, reason)


class OpenTransactionError(SagaError):
    """A side-effecting call was made inside the app's open transaction, which the journal (on its
    own connection) cannot follow: were the transaction to roll back, the journal would still say
    ``succeeded`` and an unwind would undo an effect that never happened."""

    def __init__(self, run_id: str, tool_call_id: str, tool_name: str, transaction: str) -> None:
        super().__init__(
            f"run {run_id!r}: call {tool_call_id!r} of tool {tool_name!r} was made inside {transaction}, "
            "which the journal does not share: it would be journaled succeeded even if that transaction "
            "rolls back. Nothing was executed or recorded. Send the step once the transaction commits "
            "(Django: transaction.on_commit(lambda: step.delay(...)); SQLAlchemy: after session.commit()), "
            "or make the call outside the transaction",
            run_id=run_id,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            transaction=transaction,
        )


class UnwindInTransactionError(OpenTransactionError):
    """An unwind's write (its tombstone, a compensation's claim or lease, its rows, the sweeper's
    state) was asked for inside an app transaction the journal would join. An unwind's writes commit
    on their own (the tombstone on stable storage before the first compensation runs, each claim
    before its hook); written there, they would commit or roll back with the app's transaction."""

    def __init__(self, what: str) -> None:
        SagaError.__init__(
            self,
            f"{what} was asked for inside the app's open transaction on the journal's database, which the "
            "journal joins (a Tool(in_transaction=True) call made in it; on SQLite any transaction of the "
            "app's on the journal's file): an unwind's writes must commit on their own, never with the "
            "app's transaction. Nothing was written and no compensation ran. Unwind once the transaction "
            "has committed (Django: transaction.on_commit(lambda: compensate_run.delay(run_id))), or "
            "outside it",
            what=what,
        )
        self._rebuilds_from(what)
