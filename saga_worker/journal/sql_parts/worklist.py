"""A run's worklist in SQL: the run (with who condemned it), its records and their claims, read
together in one round trip where a round trip costs, and what the report of a distributed unwind
is assembled from: the unwind's entries, the run and its records, no claims
(``Journal.read_worklist``, ``Journal.read_report``)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .. import driver
from ..driver import Prepared
from ..records import RecordStatus, ReportView, UnwindInfo, WorklistView
from .claims import claim_row
from .common import PlumbingStatements, SqlPlumbing
from .gate import RUN_FIELDS, run_of
from .records import RECORD_FIELDS, RECORD_ORIGIN, pick_record, records_of_values
from .unwinds import entries_by_position, unwind_row

# A worklist as read: the run row with who condemned it (as ``RUN_READ``'s values), its records (each
# as ``RECORD_FIELDS``' values), their claims' rows.
WorklistRows = tuple[tuple[Any, ...] | None, list[tuple[Any, ...]], list[driver.Row]]
# The run's columns as a worklist reads them (``run_with_condemner``): the run's, then who condemned it.
RUN_READ = (*RUN_FIELDS, "condemner_actor", "condemner_reason")
_pick_run = operator.itemgetter(*RUN_READ)  # out of a row read as a dict (a pipeline's)
_CONDEMNER = len(RUN_FIELDS)  # where who condemned the run starts in ``RUN_READ``


class WorklistReads(PlumbingStatements, Protocol):
    """The statements a worklist and a report read (built by the runs', records', claims' and
    unwinds' parts)."""

    run_with_condemner: Prepared
    records_of_run: Prepared
    claims_of_origin: Prepared
    unwind_get: Prepared
    entries_of_unwind: Prepared


class SqlWorklist(SqlPlumbing):
    """``read_worklist`` and ``read_report`` in as few round trips as the dialect allows."""

    _q: WorklistReads

    def read_worklist(self, run_id: str, statuses: Sequence[RecordStatus]) -> WorklistView:
        return self._worklist_view(self._fetch(self._worklist_reads(run_id)), statuses)

    def read_report(
        self,
        unwind_id: str,
        run_id: str,
        statuses: Sequence[RecordStatus],
        *,
        unwind: UnwindInfo | None = None,
    ) -> ReportView:
        q, by_unwind = self._q, {"unwind": unwind_id}
        # The unwind only if the caller has not read it (the last step task has); never the claims:
        # the report says what the entries say.
        first = [(q.entries_of_unwind, by_unwind)]
        if unwind is None:
            first.insert(0, (q.unwind_get, by_unwind))

        def work(tx: driver.Tx) -> tuple[list[list[driver.Row]], WorklistRows]:
            # The run's records always: the report numbers each step's group by them (in the same
            # pipeline where a round trip costs, so no round trip more).
            q, by_run = self._q, {"run": run_id}
            reads = [*first, (q.run_with_condemner, by_run), (q.records_of_run, by_run)]
            *before, run, rows = self._reads(tx, reads)
            return before, (_pick_run(run[0]) if run else None, [pick_record(r) for r in rows], [])

        before, read = self._fetch(work)
        if unwind is None:
            found, rows = before
            unwind = unwind_row(found[0]) if found else None
        else:
            (rows,) = before
        return ReportView(unwind, entries_by_position(rows, unwind_id), self._worklist_view(read, statuses))

    def _worklist_reads(self, run_id: str) -> Callable[[driver.Tx], WorklistRows]:
        return lambda tx: self._read_with_worklist(tx, run_id, [])[1]

    def _read_with_worklist(
        self,
        tx: driver.Tx,
        run_id: str,
        first: list[tuple[driver.Prepared, dict[str, Any]]],
        *,
        framed: driver.Frame | None = None,
    ) -> tuple[list[list[driver.Row]], WorklistRows]:
        """The rows of each of ``first``'s reads, then the run's worklist rows (the run with who
        condemned it, its records, their claims): in one pipeline where a round trip costs
        (PostgreSQL: the run's own claims read with them, a fork's copied steps' after; ``framed``
        as ``driver.Tx.batch``), else one statement after the other."""
        q, by_run = self._q, {"run": run_id}
        if self.policy.transactions_cost_round_trips:
            reads = [*first, (q.run_with_condemner, by_run)]
            *before, runs, found, claims = tx.batch(
                [*reads, (q.records_of_run, by_run), (q.claims_of_origin, {"origin": run_id})], framed=framed
            )
            run = _pick_run(runs[0]) if runs else None
            rows = [pick_record(r) for r in found]
            origins = sorted({r[RECORD_ORIGIN] for r in rows} - {run_id})
        else:  # the run and its records read as values (``Tx.picked``): no dict made for either
            before = self._reads(tx, first)
            run = tx.picked(q.run_with_condemner, by_run, RUN_READ)
            rows = tx.all_picked(q.records_of_run, by_run, RECORD_FIELDS)
            claims, origins = [], sorted({r[RECORD_ORIGIN] for r in rows})
        claims += [c for o in origins for c in tx.all(q.claims_of_origin, {"origin": o})]
        return before, (run, rows, claims)

    def _reads(
        self, tx: driver.Tx, reads: list[tuple[driver.Prepared, dict[str, Any]]]
    ) -> list[list[driver.Row]]:
        """Each read's rows: in one pipeline where a round trip costs, else one after the other."""
        if self.policy.transactions_cost_round_trips:
            return tx.batch(reads)
        return [tx.all(stmt, params) for stmt, params in reads]

    def _worklist_view(self, read: WorklistRows, statuses: Sequence[RecordStatus]) -> WorklistView:
        run, rows, claim_rows = read
        found = records_of_values(rows, statuses)
        wanted = {(r.origin_run_id, r.suffix) for r in found}
        owned = [c for c in map(claim_row, claim_rows) if (c.origin_run_id, c.suffix) in wanted]
        claims = {(c.origin_run_id, c.suffix): c for c in owned}
        if run is None:
            return WorklistView(None, found, claims)
        who = (run[_CONDEMNER], run[_CONDEMNER + 1] or None)
        return WorklistView(run_of(run), found, claims, who)
