"""Runs (their forks and planner decisions) in SQL. The tombstone is ``tombstone.py``'s, the tombstone
gate every call passes on the run's row ``gate.py``'s."""

from __future__ import annotations

import time
from typing import Any, Protocol

import sqlalchemy as sa

from ...core.storable import storable_or_none
from ...errors import CompensatedRunError, RunExistsError, UnknownRunError
from .. import driver
from ..dialects import policy_for
from ..driver import Prepared
from ..records import RunInfo, RunQuery, RunStatus, UnwindState, like_pattern
from ..retention import refuse_pruned
from ..schema import decisions, records, runs
from .common import ENDED, NEW_RUN, NOW, RUN, SqlPlumbing, StatementsBase, b
from .common import dump_json as _dump
from .common import load_json as _load
from .gate import GateReads, refusal, run_row


class RunStatements(StatementsBase):
    def _build_runs(self) -> None:
        """A run: start, read, end."""
        insert = self.policy.insert
        p = self._prepare
        self.run_get = p(sa.select(runs).where(RUN))
        self.run_insert = p(
            insert(runs)
            .values(**NEW_RUN, traceparent=b("run_trace", type_=sa.String))
            .on_conflict_do_nothing(index_elements=["run_id"])
            .returning(*runs.c)
        )
        self.run_end = p(
            sa.update(runs)
            .where(RUN, runs.c.status == RunStatus.RUNNING.value)
            .values(status=b("new_status"), text=b("new_text"), error=b("new_error"), updated_at=NOW)
            .returning(*runs.c)
        )

    def _build_wake(self) -> None:
        """A decision on a compensation gate makes a run halted at it due for the sweeper at once."""
        self.wake_awaiting = self._prepare(
            sa.update(runs)
            .where(RUN, runs.c.unwind_state == UnwindState.AWAITING.value)
            .values(
                unwind_state=UnwindState.PENDING.value, unwind_next_at=self.policy.clock(), updated_at=NOW
            )
        )

    def _build_listings(self) -> None:
        """Counts of runs for the console (its pages are ``run_page``)."""
        p = self._prepare
        self.runs_in_unwind_state = p(
            sa.select(sa.func.count()).select_from(runs).where(runs.c.unwind_state == b("state"))
        )

    def _build_forks(self) -> None:
        """A fork: lock the source's row (as a claim does), make the new run, copy what it inherits."""
        insert = self.policy.insert
        p = self._prepare
        self.fork_lock_source = p(
            sa.update(runs)
            .where(runs.c.run_id == b("src"))
            .values(next_seq=runs.c.next_seq)
            .returning(*runs.c)
        )
        self.fork_insert = p(
            insert(runs)
            .values(**NEW_RUN, next_seq=b("at_seq"), source_run_id=b("src"))
            .on_conflict_do_nothing(index_elements=["run_id"])
            .returning(runs.c.run_id)
        )
        self.fork_decisions = p(
            decisions.insert().from_select(
                ["run_id", "step", "payload", "created_at"],
                sa.select(b("run", type_=sa.String), decisions.c.step, decisions.c.payload, NOW).where(
                    decisions.c.run_id == b("src"), decisions.c.step <= b("upto")
                ),
            )
        )
        copied = [c for c in records.c if c.name != "run_id"]
        self.fork_records = p(
            records.insert().from_select(
                ["run_id", *[c.name for c in copied]],
                sa.select(b("run", type_=sa.String), *copied).where(
                    records.c.run_id == b("src"), records.c.step <= b("upto")
                ),
            )
        )

    def _build_decisions(self) -> None:
        """Planner decisions, one row per step."""
        insert = self.policy.insert
        p = self._prepare
        decision = (decisions.c.run_id == b("run"), decisions.c.step == b("at_step"))
        # Nothing is decided after a run's end: the insert selects its row only while the run has not ended.
        ended = sa.exists(sa.select(runs.c.run_id).where(RUN, ENDED))
        self.decision_insert = p(
            insert(decisions)
            .from_select(
                ["run_id", "step", "payload", "created_at"],
                sa.select(
                    b("run", type_=sa.String),
                    b("at_step", type_=sa.Integer),
                    b("new_payload", type_=sa.Text),
                    NOW,
                ).where(~ended),
            )
            .on_conflict_do_nothing(index_elements=["run_id", "step"])
            .returning(decisions.c.payload)
        )
        self.decision_get = p(sa.select(decisions.c.payload).where(*decision))
        self.decisions_of_run = p(
            sa.select(decisions.c.step, decisions.c.payload)
            .where(decisions.c.run_id == b("run"))
            .order_by(decisions.c.step)
        )


def run_page(
    dialect: sa.Dialect,
    *,
    status: bool,
    condemned: bool | None,
    unwind: bool,
    search: bool,
    after: bool,
    search_by_scan: bool = False,
    contains: bool = False,
) -> Prepared:
    """The runs listing for one shape of filters (each shape is prepared once, then cached).

    Keyset paging on ``(updated_at, run_id)``, newest first: a page starts strictly after the last
    row of the previous one, so page 10,000 costs what page 1 does. Each filter has an index that
    leads with it and continues with the keyset columns (migration 0003). The id search is a prefix
    as a range (``lo <= run_id < hi``), which an index serves; on PostgreSQL it compares bytes
    (``COLLATE "C"``), as SQLite does, so the range is exact whatever the database's collation."""
    where: list[sa.ColumnElement[bool]] = []
    if status:
        where.append(runs.c.status == b("want_status"))
    if condemned is True:
        where.append(runs.c.condemned_at.is_not(None))
    elif condemned is False:
        where.append(runs.c.condemned_at.is_(None))
    if unwind:
        where.append(runs.c.unwind_state == b("want_unwind"))
    if search and search_by_scan:
        # The same test through a function, so that no index on run_id serves it: the page index is
        # walked instead, for a prefix so common that reading its whole range would cost more.
        where.append(sa.func.substr(runs.c.run_id, 1, sa.func.length(b("id_lo"))) == b("id_lo"))
    elif search:
        run_id: sa.ColumnElement[str] = policy_for(dialect.name).byte_ordered(runs.c.run_id)
        where += [run_id >= b("id_lo"), run_id < b("id_hi")]
    if contains:  # any part of the id, any case: the page index is walked, each id tested
        where.append(sa.func.lower(runs.c.run_id).like(b("id_like"), escape="\\"))
    if after:
        where.append(
            sa.tuple_(runs.c.updated_at, runs.c.run_id)
            < sa.tuple_(b("before_at", type_=sa.Double), b("before_id", type_=sa.String))
        )
    stmt = (
        sa.select(runs)
        .where(*where)
        .order_by(runs.c.updated_at.desc(), runs.c.run_id.desc())
        .limit(b("max_rows", type_=sa.Integer))
    )
    return Prepared(stmt, dialect)


def prefix_count(dialect: sa.Dialect) -> Prepared:
    """How many run ids start with the prefix, counting no further than ``enough``."""
    inner = (
        sa.select(runs.c.run_id)
        .where(runs.c.run_id >= b("id_lo"), runs.c.run_id < b("id_hi"))
        .limit(b("enough", type_=sa.Integer))
        .subquery()
    )
    return Prepared(sa.select(sa.func.count()).select_from(inner), dialect)


class RunReads(GateReads, Protocol):
    """The statements ``SqlRuns`` reads (its own and other areas')."""

    condemned_at: Prepared
    decision_get: Prepared
    decision_insert: Prepared
    decisions_of_run: Prepared
    fork_decisions: Prepared
    fork_insert: Prepared
    fork_lock_source: Prepared
    fork_records: Prepared
    run_end: Prepared
    run_insert: Prepared
    runs_in_unwind_state: Prepared


class SqlRuns(SqlPlumbing):
    """``RunsPart`` (``journal/parts.py``) on the statements above."""

    _q: RunReads

    def start_run(self, run_id: str, prompt: str, *, traceparent: str | None = None) -> tuple[RunInfo, bool]:
        q = self._q
        params = {"run": run_id, "new_prompt": prompt, "now": time.time(), "run_trace": traceparent}

        def work(tx: driver.Tx) -> tuple[driver.Row | None, bool]:
            made = tx.one(q.run_insert, params)
            return (made, True) if made is not None else (tx.one(q.run_get, params), False)

        row, created = self._write(work)
        assert row is not None  # the insert lost to an existing row, and rows are never deleted
        run = run_row(row)
        if not created and run.condemned:
            raise CompensatedRunError(run_id)
        return run, created

    def get_run(self, run_id: str) -> RunInfo | None:
        row = self._fetch(lambda tx: tx.one(self._q.run_get, {"run": run_id}))
        return None if row is None else run_row(row)

    def page_runs(self, query: RunQuery) -> list[RunInfo]:
        shape = (
            query.status is not None,
            query.condemned,
            query.unwind_state is not None,
            query.search is not None,
            query.before is not None,
            query.search is not None and self._common_prefix(query.search),
            query.contains is not None,
        )
        pages: dict[tuple[Any, ...], driver.Prepared] = self.__dict__.setdefault("_pages", {})
        stmt = pages.get(shape)
        if stmt is None:
            stmt = pages[shape] = run_page(
                self.engine.dialect,
                status=shape[0],
                condemned=shape[1],
                unwind=shape[2],
                search=shape[3],
                after=shape[4],
                search_by_scan=shape[5],
                contains=shape[6],
            )
        params: dict[str, Any] = {"max_rows": int(query.limit)}
        if query.status is not None:
            params["want_status"] = query.status.value
        if query.unwind_state is not None:
            params["want_unwind"] = query.unwind_state.value
        if query.search is not None:
            # Run ids are ASCII letters, digits and "_.-", all below "~": every id that starts with
            # the prefix lies in [prefix, prefix + "~"), and no other does.
            params["id_lo"], params["id_hi"] = query.search, query.search + "~"
        if query.contains is not None:
            params["id_like"] = like_pattern(query.contains)
        if query.before is not None:
            params["before_at"], params["before_id"] = float(query.before[0]), query.before[1]
        return [run_row(r) for r in self._fetch(lambda tx: tx.all(stmt, params))]

    # A prefix shared by more runs than this is searched by walking the page index, not its id range.
    COMMON_PREFIX = 5000

    def _common_prefix(self, prefix: str) -> bool:
        """SQLite's planner cannot tell a rare prefix from one every run shares (PostgreSQL's can,
        from its statistics): ask the id index, counting at most ``COMMON_PREFIX`` entries."""
        if not self.policy.counts_common_prefixes:
            return False
        stmt = self.__dict__.get("_prefix_count")
        if stmt is None:
            stmt = self.__dict__["_prefix_count"] = prefix_count(self.engine.dialect)
        params = {"id_lo": prefix, "id_hi": prefix + "~", "enough": self.COMMON_PREFIX}
        row = self._fetch(lambda tx: tx.one(stmt, params))
        return row is not None and int(next(iter(row.values()))) >= self.COMMON_PREFIX

    def count_runs(self, unwind_state: UnwindState) -> int:
        row = self._fetch(lambda tx: tx.one(self._q.runs_in_unwind_state, {"state": unwind_state.value}))
        return 0 if row is None else int(next(iter(row.values())))

    def end_run(self, run_id: str, status: RunStatus, text: str, error: str | None) -> RunInfo:
        q = self._q
        params = {
            "run": run_id,
            "new_status": status.value,
            "new_text": text,
            "new_error": storable_or_none(error),
        }

        def work(tx: driver.Tx) -> driver.Row | None:
            return tx.one(q.run_end, {**params, "now": time.time()}) or tx.one(q.run_get, params)

        row = self._write(work)
        if row is None:
            raise UnknownRunError(run_id)
        return run_row(row)

    def record_decision(self, run_id: str, step: int, payload: Any) -> Any:
        q = self._q
        params = {"run": run_id, "at_step": step, "new_payload": _dump(payload), "now": time.time()}

        def work(tx: driver.Tx) -> driver.Row:
            row = tx.one(q.decision_insert, params) or tx.one(q.decision_get, params)
            if row is None:  # not inserted and not there: the run has ended
                raise refusal(tx, self._q, run_id, gated=False)
            return row

        row = self._write(work)
        return _load(row["payload"], run_id, f"decision {step}")

    def list_decisions(self, run_id: str) -> list[Any]:
        rows = self._fetch(lambda tx: tx.all(self._q.decisions_of_run, {"run": run_id}))
        return [_load(r["payload"], run_id, f"decision {r['step']}") for r in rows]

    def fork(self, source_run_id: str, step: int, new_run_id: str) -> None:
        q = self._q
        params = {"src": source_run_id, "run": new_run_id, "upto": step, "now": time.time()}

        def work(tx: driver.Tx) -> None:
            source = tx.one(q.fork_lock_source, params)
            if source is None:
                raise UnknownRunError(source_run_id)
            if run_row(source).condemned:
                raise CompensatedRunError(source_run_id)
            refuse_pruned(run_row(source))  # under the source's row lock: ordered against a prune
            made = tx.one(
                q.fork_insert, {**params, "new_prompt": source["prompt"], "at_seq": source["next_seq"]}
            )
            if made is None:
                target = tx.one(q.condemned_at, params)
                if target is not None and target["condemned_at"] is not None:
                    raise CompensatedRunError(new_run_id)
                raise RunExistsError(new_run_id)
            tx.execute(q.fork_decisions, params)
            tx.execute(q.fork_records, params)

        self._write(work, atomic=True)
