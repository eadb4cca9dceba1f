"""A run's row as a value, and the tombstone gate every call and decision passes on that row.

The gate is one statement on the run's row (``tombstone_gate``, ``call_gate``: see
``RunStatements._build_gate``); ``condemn`` updates the same row, so whichever
commits second sees the other. ``refusal`` says why the gate refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ...errors import CompensatedRunError, RunEndedError, UnknownRunError
from .. import driver
from ..driver import Prepared
from ..records import RunInfo, RunStatus, UnwindState, parse_status
from .common import PlumbingStatements


class GateStatements(PlumbingStatements, Protocol):
    """The statements the gate runs (``RunStatements`` builds them)."""

    run_get: Prepared
    tombstone_gate: Prepared
    next_seq_ungated: Prepared
    call_gate_lock: Prepared


def run_row(m: Mapping[Any, Any]) -> RunInfo:
    return RunInfo(
        run_id=m["run_id"],
        status=parse_status(RunStatus, m["status"], m["run_id"], "run status"),
        prompt=m["prompt"],
        text=m["text"],
        error=m["error"],
        condemned_at=m["condemned_at"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        source_run_id=m["source_run_id"],
        unwind_state=parse_status(UnwindState, m["unwind_state"], m["run_id"], "unwind state"),
        unwind_attempts=m["unwind_attempts"],
        unwind_next_at=m["unwind_next_at"],
        unwind_note=m["unwind_note"],
        unwind_epoch=m.get("unwind_epoch") or 0,
        traceparent=m.get("traceparent"),
    )


def tombstone_gate(tx: driver.Tx, q: GateStatements, run_id: str, gated: bool) -> int:
    """Lock the run's row and take the next sequence number, refusing a condemned run if ``gated``.

    This row lock is what orders a claim against the tombstone: ``condemn`` updates the same row,
    so whichever commits second sees the other."""
    params = {"run": run_id}
    row = tx.one(q.tombstone_gate if gated else q.next_seq_ungated, params)
    if row is not None:
        return int(row["next_seq"])
    raise refusal(tx, q, run_id, gated=gated)


def call_gate(tx: driver.Tx, q: GateStatements, run_id: str) -> None:
    """The gated tombstone gate without a sequence number (a shared execution's claim)."""
    if tx.one(q.call_gate_lock, {"run": run_id}) is None:
        raise refusal(tx, q, run_id, gated=True)


def refusal(tx: driver.Tx, q: GateStatements, run_id: str, *, gated: bool) -> Exception:
    """Why the gate refused: an unknown run, a condemned one (``gated``), or one that has ended."""
    row = tx.one(q.run_get, {"run": run_id})
    if row is None:
        return UnknownRunError(run_id)
    run = run_row(row)
    if run.ended and not (gated and run.condemned):
        return RunEndedError(run_id, run.status.value)
    return CompensatedRunError(run_id)
