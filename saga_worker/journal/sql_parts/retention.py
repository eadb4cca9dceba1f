"""Retention in SQL: prune ended, settled runs in bounded batches, leaving each a stub (the rule:
``journal/retention.py``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from .. import driver
from ..driver import Prepared
from ..records import JournalSize, RunInfo, UnwindState
from ..retention import PRUNABLE_STATUSES, UNRESOLVED_CALLS, Archive
from ..schema import (
    audit,
    claims,
    decisions,
    forked_records_clause,
    gates,
    records,
    runs,
    unwind_entries,
    unwinds,
)
from .common import PlumbingStatements, SqlPlumbing, StatementsBase, b
from .gate import run_row


def prunable() -> list[sa.ColumnElement[bool]]:
    """The rule as SQL, on a row of ``saga_runs`` (every condition on that row, so that PostgreSQL
    checks them again on the row it locks)."""
    settled = sa.or_(
        sa.and_(runs.c.condemned_at.is_(None), runs.c.unwind_state == UnwindState.NONE.value),
        sa.and_(runs.c.condemned_at.is_not(None), runs.c.unwind_state == UnwindState.COMPLETE.value),
    )
    open_calls = sa.exists(
        sa.select(records.c.run_id).where(
            records.c.run_id == runs.c.run_id,
            sa.or_(*(records.c.status == s.value for s in UNRESOLVED_CALLS)),
        )
    )
    forked = sa.exists(
        sa.select(records.c.run_id).where(records.c.origin_run_id == runs.c.run_id, forked_records_clause())
    )
    return [
        runs.c.pruned_at.is_(None),
        sa.or_(*(runs.c.status == s.value for s in PRUNABLE_STATUSES)),
        settled,
        runs.c.updated_at < b("cutoff", type_=sa.Double),
        sa.tuple_(runs.c.updated_at, runs.c.run_id)
        > sa.tuple_(b("after_at", type_=sa.Double), b("after_id", type_=sa.String)),
        ~open_calls,
        ~forked,
    ]


class RetentionStatements(StatementsBase):
    def _build_retention(self) -> None:
        """Prune: choose and stamp a batch, read what it removes, clear the stubs, delete the rest."""
        p = self._prepare
        rule = prunable()
        oldest_first = (runs.c.updated_at, runs.c.run_id)
        self.prunable_page = p(
            sa.select(runs).where(*rule).order_by(*oldest_first).limit(b("max_rows", type_=sa.Integer))
        )
        self.prunable_count = p(sa.select(sa.func.count()).select_from(runs).where(*rule))
        batch = (
            sa.select(runs.c.run_id)
            .where(*rule)
            .order_by(*oldest_first)
            .limit(b("max_rows", type_=sa.Integer))
        )
        # The rule again on the outer statement: PostgreSQL re-checks it on each row once locked, so a
        # run condemned or given a new call while the batch was chosen is left alone.
        self.prune_stamp = p(
            sa.update(runs)
            .where(runs.c.run_id.in_(batch.scalar_subquery()), *rule)
            .values(pruned_at=b("stamp", type_=sa.Double))
            .returning(*runs.c)
        )
        stamped = sa.select(runs.c.run_id).where(runs.c.pruned_at == b("stamp", type_=sa.Double))
        of_batch = stamped.scalar_subquery()
        batch_unwinds = sa.select(unwinds.c.unwind_id).where(unwinds.c.run_id.in_(of_batch)).scalar_subquery()
        self.prune_reads = {
            "decisions": p(sa.select(decisions).where(decisions.c.run_id.in_(of_batch))),
            "records": p(sa.select(records).where(records.c.run_id.in_(of_batch))),
            "claims": p(sa.select(claims).where(claims.c.origin_run_id.in_(of_batch))),
            "gates": p(sa.select(gates).where(gates.c.origin_run_id.in_(of_batch))),
            "unwinds": p(sa.select(unwinds).where(unwinds.c.run_id.in_(of_batch))),
            "unwind_entries": p(
                sa.select(unwind_entries).where(unwind_entries.c.unwind_id.in_(batch_unwinds))
            ),
            "audit": p(sa.select(audit).where(audit.c.run_id.in_(of_batch)).order_by(audit.c.id)),
        }
        # Entries before their unwinds (the subquery reads the unwinds).
        self.prune_deletes = [
            p(sa.delete(unwind_entries).where(unwind_entries.c.unwind_id.in_(batch_unwinds))),
            p(sa.delete(unwinds).where(unwinds.c.run_id.in_(of_batch))),
            p(sa.delete(decisions).where(decisions.c.run_id.in_(of_batch))),
            p(sa.delete(records).where(records.c.run_id.in_(of_batch))),
            p(sa.delete(claims).where(claims.c.origin_run_id.in_(of_batch))),
            p(sa.delete(gates).where(gates.c.origin_run_id.in_(of_batch))),
            p(sa.delete(audit).where(audit.c.run_id.in_(of_batch))),
        ]
        self.prune_clear = p(
            sa.update(runs)
            .where(runs.c.pruned_at == b("stamp", type_=sa.Double))
            .values(prompt="", text="", error=None)
        )
        live = runs.c.pruned_at.is_(None)
        self.journal_counts = p(
            sa.select(
                sa.func.count(),
                sa.func.coalesce(sa.func.sum(sa.case((live, 0), else_=1)), 0),
            ).select_from(runs)
        )
        self.journal_oldest = p(
            sa.select(runs.c.run_id, runs.c.updated_at).where(live).order_by(*oldest_first).limit(1)
        )


class RetentionReads(PlumbingStatements, Protocol):
    prunable_page: Prepared
    prunable_count: Prepared
    prune_stamp: Prepared
    prune_reads: dict[str, Prepared]
    prune_deletes: list[Prepared]
    prune_clear: Prepared
    journal_counts: Prepared
    journal_oldest: Prepared


FIRST = (float("-inf"), "")


class SqlRetention(SqlPlumbing):
    """``RetentionPart`` (``journal/parts.py``) on the statements above."""

    _q: RetentionReads

    def prunable_runs(
        self, before: float, *, limit: int = 100, after: tuple[float, str] | None = None
    ) -> list[RunInfo]:
        at, run_id = after or FIRST
        params = {"cutoff": before, "after_at": at, "after_id": run_id, "max_rows": int(limit)}
        return [run_row(r) for r in self._fetch(lambda tx: tx.all(self._q.prunable_page, params))]

    def count_prunable(self, before: float) -> int:
        params = {"cutoff": before, "after_at": FIRST[0], "after_id": FIRST[1]}
        row = self._fetch(lambda tx: tx.one(self._q.prunable_count, params))
        return 0 if row is None else int(next(iter(row.values())))

    def prune_runs(
        self,
        before: float,
        *,
        limit: int = 500,
        after: tuple[float, str] | None = None,
        archive: Archive | None = None,
    ) -> list[RunInfo]:
        q = self._q
        at, run_id = after or FIRST
        stamp = time.time()
        params: dict[str, Any] = {
            "cutoff": before,
            "after_at": at,
            "after_id": run_id,
            "max_rows": int(limit),
            "stamp": stamp,
        }

        def work(tx: driver.Tx) -> list[driver.Row]:
            stamped = tx.all(q.prune_stamp, params)
            if not stamped:
                return []
            if archive is not None:
                archive(_archived(stamped, {name: tx.all(s, params) for name, s in q.prune_reads.items()}))
            tx.execute(q.prune_clear, params)
            for statement in q.prune_deletes:
                tx.execute(statement, params)
            return stamped

        rows = self._write(work, atomic=True)
        stubs = [run_row({**r, "prompt": "", "text": "", "error": None}) for r in rows]
        return sorted(stubs, key=lambda r: (r.updated_at, r.run_id))

    def journal_size(self) -> JournalSize:
        def work(tx: driver.Tx) -> tuple[driver.Row | None, driver.Row | None]:
            return tx.one(self._q.journal_counts, {}), tx.one(self._q.journal_oldest, {})

        counts, oldest = self._fetch(work)
        total, pruned = (int(v or 0) for v in (counts or {}).values()) if counts else (0, 0)
        return JournalSize(
            runs=total - pruned,
            pruned=pruned,
            oldest_run_id=None if oldest is None else oldest["run_id"],
            oldest_at=None if oldest is None else oldest["updated_at"],
        )


def _archived(stamped: Sequence[driver.Row], rows: dict[str, list[driver.Row]]) -> list[dict[str, Any]]:
    """One dict per run: its row and every row of each table that goes with it."""
    key = {"claims": "origin_run_id", "gates": "origin_run_id"}
    of_unwind = {r["unwind_id"]: r["run_id"] for r in rows["unwinds"]}
    out: list[dict[str, Any]] = []
    for run in sorted(stamped, key=lambda r: (r["updated_at"], r["run_id"])):
        run_id = run["run_id"]
        line: dict[str, Any] = {"run": dict(run)}
        for name, found in rows.items():
            if name == "unwind_entries":
                line[name] = [r for r in found if of_unwind.get(r["unwind_id"]) == run_id]
            else:
                line[name] = [r for r in found if r[key.get(name, "run_id")] == run_id]
        out.append(line)
    return out
