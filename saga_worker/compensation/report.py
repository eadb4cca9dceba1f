"""The compensation report: one honest entry per step, in unwind order (DESIGN.md §3)."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict


class CompensationStatus(str, Enum):
    COMPENSATED = "compensated"  # the compensate hook returned in this unwind
    ALREADY_COMPENSATED = "already-compensated"  # an earlier unwind (of this run or a fork) undid it
    WOULD_COMPENSATE = "would-compensate"  # dry run: the hook would be called
    SKIPPED_NO_HOOK = "skipped-no-hook"  # the tool has no compensate hook (or is not in tools)
    SKIPPED_NOT_EXECUTED = "skipped-not-executed"  # recover says the interrupted call never took effect
    UNCERTAIN = "uncertain"  # interrupted call, and nothing can tell whether it took effect
    BUSY = "busy"  # another unwinder holds this step right now; the unwind stops
    FAILED = "failed"  # the compensate hook raised; the unwind stops, a later call retries
    NOT_ATTEMPTED = "not-attempted"  # the unwind stopped before this step; nothing was probed


HALTING = frozenset({CompensationStatus.BUSY, CompensationStatus.FAILED})
# Steps that need nothing more: an unwind whose entries are all settled is complete.
SETTLED = frozenset(
    {
        CompensationStatus.COMPENSATED,
        CompensationStatus.ALREADY_COMPENSATED,
        CompensationStatus.SKIPPED_NO_HOOK,
        CompensationStatus.SKIPPED_NOT_EXECUTED,
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


class CompensationReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    dry_run: bool
    condemned: bool
    entries: list[CompensationEntry]

    @property
    def complete(self) -> bool:
        """True when every step is undone or needs nothing (no uncertain, failed, busy or skipped-over step)."""
        return not self.dry_run and all(e.status in SETTLED for e in self.entries)

    @property
    def halted(self) -> bool:
        return any(e.status in HALTING for e in self.entries)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for entry in self.entries:
            out[entry.status.value] = out.get(entry.status.value, 0) + 1
        return out
