"""A run's row as a value, and the tombstone gate every call and decision passes on that row.

The gate is one statement on the run's row (``tombstone_gate``, ``call_gate``: see
``GateStatements._build_gate``); ``condemn`` updates the same row, so whichever
commits second sees the other. ``refusal`` says why the gate refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from ...errors import CompensatedRunError, RunEndedError, UnknownRunError
from .. import driver
from ..driver import Prepared
from ..records import RunInfo, RunStatus, UnwindState, parse_status
from ..schema import runs
from .common import NOT_ENDED, RUN, PlumbingStatements, StatementsBase


class GateStatements(StatementsBase):
    def _build_gate(self) -> None:
        """The tombstone gate every tool call passes, on the run's row."""
        p = self._prepare
        # The tombstone gate: lock the run's row and take the next sequence number (``tombstone_gate``).
        # A run that has ended takes no new call, gated or not: checked on the same row, in the same statement.
        bump_seq = {"next_seq": runs.c.next_seq + 1}
        self.tombstone_gate = p(
            sa.update(runs)
            .where(RUN, runs.c.condemned_at.is_(None), NOT_ENDED)
            .values(**bump_seq)
            .returning(runs.c.next_seq)
        )
        self.next_seq_ungated = p(
            sa.update(runs).where(RUN, NOT_ENDED).values(**bump_seq).returning(runs.c.next_seq)
        )
        # The same gate without a sequence number, for a claim that is no record (a shared execution) and a
        # person's decision on a suspended call: ordered against the tombstone and the run's end the same way.
        self.call_gate_lock = p(
            sa.update(runs)
            .where(RUN, runs.c.condemned_at.is_(None), NOT_ENDED)
            .values(next_seq=runs.c.next_seq)
            .returning(runs.c.next_seq)
        )


class GateReads(PlumbingStatements, Protocol):
    """The statements the gate runs (``GateStatements``'s, and ``RunStatements``'s ``run_get``)."""

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
        pruned_at=m.get("pruned_at"),
    )


# A run's columns in the order of ``RunInfo``'s fields (``run_of``).
RUN_FIELDS = tuple(field.name for field in dataclasses.fields(RunInfo))


def run_of(v: Sequence[Any]) -> RunInfo:
    """``run_row`` of a row read as ``RUN_FIELDS``' values (``Tx.picked``): no dict made for it."""
    rid = v[0]
    return RunInfo(
        rid,
        parse_status(RunStatus, v[1], rid, "run status"),
        v[2],
        v[3],
        v[4],
        v[5],
        v[6],
        v[7],
        v[8],
        parse_status(UnwindState, v[9], rid, "unwind state"),
        v[10],
        v[11],
        v[12],
        v[13] or 0,
        v[14],
        v[15],
    )


def tombstone_gate(tx: driver.Tx, q: GateReads, run_id: str, gated: bool) -> int:
    """Lock the run's row and take the next sequence number, refusing a condemned run if ``gated``.

    This row lock is what orders a claim against the tombstone: ``condemn`` updates the same row,
    so whichever commits second sees the other."""
    params = {"run": run_id}
    row = tx.one(q.tombstone_gate if gated else q.next_seq_ungated, params)
    if row is not None:
        return int(row["next_seq"])
    raise refusal(tx, q, run_id, gated=gated)


def call_gate(tx: driver.Tx, q: GateReads, run_id: str) -> None:
    """The gated tombstone gate without a sequence number (a shared execution's claim)."""
    if tx.one(q.call_gate_lock, {"run": run_id}) is None:
        raise refusal(tx, q, run_id, gated=True)


def refusal(tx: driver.Tx, q: GateReads, run_id: str, *, gated: bool) -> Exception:
    """Why the gate refused: an unknown run, a condemned one (``gated``), or one that has ended."""
    row = tx.one(q.run_get, {"run": run_id})
    if row is None:
        return UnknownRunError(run_id)
    run = run_row(row)
    if run.ended and not (gated and run.condemned):
        return RunEndedError(run_id, run.status.value)
    return CompensatedRunError(run_id)
