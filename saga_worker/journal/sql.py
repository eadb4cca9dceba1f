"""The SQL journal: SQLite for the embedded default, PostgreSQL for production.

Its statements are written once in SQLAlchemy Core (``statements.py``) and run straight on the
driver (``driver.py``): the per-call machinery of ``Connection.execute`` cost more than SQLite's
whole commit. Concurrency rests on two habits. Every insert is insert-if-absent judged by
``RETURNING`` (with psycopg 3, ``ON CONFLICT DO NOTHING`` reports a row count of -1, so a row count
cannot tell who won). Every state change is an ``UPDATE … WHERE <expected state>``, which PostgreSQL
re-checks after taking the row lock and SQLite runs inside ``BEGIN IMMEDIATE`` (one writer at a
time, with a busy timeout).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa

from ..errors import (
    CompensatedRunError,
    JournalError,
    RunExistsError,
    UnknownRunError,
)
from ..redact import redact_url
from ..storable import storable_or_none
from . import driver, migrate
from .base import Journal
from .dialects import POLICIES, policy_for
from .records import (
    NewAudit,
    NewRecord,
    RecordStatus,
    RunInfo,
    RunQuery,
    RunStatus,
    ToolRecord,
    UnwindState,
    WorklistView,
    like_pattern,
)
from .sql_parts.audit import SqlAudit, audit_params
from .sql_parts.claims import SqlClaims, claim_row
from .sql_parts.common import Conflict as _Conflict
from .sql_parts.common import dump_json as _dump
from .sql_parts.common import load_json as _load
from .sql_parts.records import record_row
from .sql_parts.runs import refusal, run_row, tombstone_gate
from .sql_parts.shared import SqlShared
from .sql_parts.sweeps import SqlSweeps
from .sql_parts.unwinds import SqlUnwinds
from .statements import prefix_count, run_page

T = TypeVar("T")


class SqlJournal(SqlSweeps, SqlUnwinds, SqlAudit, SqlShared, SqlClaims, Journal):
    """A journal in a SQL database. Every process that opens the same URL sees the same journal."""

    def __init__(
        self,
        url: str,
        *,
        migrate_schema: bool | None = None,
        engine: sa.Engine | None = None,
        create: bool = True,
    ) -> None:
        self.url = url
        if not create and engine is None:
            _refuse_missing_sqlite_file(url)
        self.engine = engine if engine is not None else _create_engine(url)
        self.dialect = self.engine.dialect.name
        self.policy = policy_for(self.dialect)
        self._connections = driver.Connections(self.engine, self.policy)
        self.guard_bound_to_process = self.policy.guard_proves_holder_gone(self.engine)
        if migrate_schema is None:
            migrate_schema = self.policy.migrates_on_open
        try:
            current = migrate.current_revision(self.engine)
            if current is None and not create:
                self.engine.dispose()
                raise JournalError(
                    f"{redact_url(url)} holds no saga-worker journal (no schema): check SAGA_JOURNAL_URL; "
                    "a command that reads never creates one",
                    url=redact_url(url),
                )
            if current != migrate.head_revision():
                if not migrate_schema:
                    raise JournalError(
                        f"journal at {redact_url(url)} has schema revision {current or 'none'}, expected "
                        f"{migrate.head_revision()}: run `saga-worker db upgrade`",
                        url=redact_url(url),
                    )
                migrate.upgrade(self.engine)
        except sa.exc.OperationalError as exc:
            self.engine.dispose()
            raise JournalError(
                f"cannot open journal {redact_url(url)}: {exc.orig}", url=redact_url(url)
            ) from exc

    def close(self) -> None:
        self._connections.close()
        self.engine.dispose()

    def reset_after_fork(self) -> None:
        # A fresh pool for this process; the kept per-thread connections notice the new pid themselves.
        self.engine.dispose(close=False)

    def __repr__(self) -> str:
        return f"SqlJournal({redact_url(self.url)!r})"

    # -- execution guards (see Journal.execution_guard) -------------------------------------------
    def _try_guard(self, run_id: str, suffix: str) -> object | None:
        if self.policy.guards_across_processes(self.engine):
            return self.policy.try_guard(self.engine, run_id, suffix)
        return super()._try_guard(run_id, suffix)  # in-process only, where the OS offers no such lock

    def _release_guard(self, token: object) -> None:
        if self.policy.guards_across_processes(self.engine):
            self.policy.release_guard(token)
        else:
            super()._release_guard(token)

    # -- rows to values ---------------------------------------------------------------------------
    # -- runs -------------------------------------------------------------------------------------
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

    def condemn(self, run_id: str, *, audit: NewAudit | None = None) -> float:
        q = self._q
        params = {"run": run_id, "now": time.time()}
        if audit is not None:
            params.update(audit_params(audit))
        # The audit row rides in the tombstone's own statement where the dialect allows (written by
        # the statement that wrote the tombstone, from its RETURNING); else it follows in one transaction.
        one_statement = audit is not None and q.condemn_stamp_audited is not None
        stamp, insert = (
            (q.condemn_stamp_audited, q.condemn_insert_audited)
            if one_statement
            else (q.condemn_stamp, q.condemn_insert)
        )

        def work(tx: driver.Tx) -> float | None:
            # Three tries: on PostgreSQL a run started concurrently is invisible to the UPDATE, then makes
            # the INSERT a no-op once it commits; the next UPDATE (a fresh snapshot) sees it and stamps it.
            # Each statement is atomic alone (the UPDATE waits out a claim's row lock, then re-checks),
            # so they need no transaction around them, unless an audit row must commit with the stamp.
            for _ in range(3):
                for stmt in (stamp, insert, q.condemned_at):
                    assert stmt is not None
                    row = tx.one(stmt, params)
                    if row is not None and row["condemned_at"] is not None:
                        if audit is not None and not one_statement and stmt is not q.condemned_at:
                            tx.one(q.audit_insert, params)  # this call wrote it
                        return float(row["condemned_at"])
            return None

        # durable before any hook runs (Journal.condemn); atomic when the audit row commits with it
        stamped = self._write(work, atomic=audit is not None and not one_statement, durable=True)
        if stamped is None:
            raise JournalError(
                f"run {run_id!r}: could not write its tombstone (its row kept changing)", run_id=run_id
            )
        return stamped

    # -- decisions --------------------------------------------------------------------------------
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

    # -- records ----------------------------------------------------------------------------------
    def get_record(self, run_id: str, suffix: str) -> ToolRecord | None:
        row = self._fetch(lambda tx: tx.one(self._q.record_get, {"run": run_id, "step_suffix": suffix}))
        return None if row is None else record_row(row)

    def list_records(self, run_id: str, statuses: Sequence[RecordStatus] | None = None) -> list[ToolRecord]:
        rows = self._fetch(lambda tx: tx.all(self._q.records_of_run, {"run": run_id}))
        return self._records(rows, statuses)

    def waiting_records(self, *, limit: int = 500) -> list[ToolRecord]:
        # Filtered on the column (unlike _records): a row of a status this code does not know is
        # not one a person is asked about; it still fails closed wherever a run's records are read.
        rows = self._fetch(lambda tx: tx.all(self._q.records_waiting, {"max_rows": int(limit)}))
        return [record_row(r) for r in rows]

    def _records(self, rows: list[driver.Row], statuses: Sequence[RecordStatus] | None) -> list[ToolRecord]:
        # Every row is parsed before any is left out: a status this code does not know (another case, a
        # newer writer's value) fails closed, naming the run and the step, instead of silently dropping
        # the step from an unwind. So the filter is on parsed values, never on the column in SQL.
        parsed = [record_row(r) for r in rows]
        if statuses is None:
            return parsed
        return [r for r in parsed if r.status in statuses]

    def read_worklist(self, run_id: str, statuses: Sequence[RecordStatus]) -> WorklistView:
        q = self._q

        def work(tx: driver.Tx) -> tuple[driver.Row | None, list[driver.Row], list[driver.Row]]:
            run = tx.one(q.run_with_condemner, {"run": run_id})
            rows = tx.all(q.records_of_run, {"run": run_id})
            origins = sorted({r["origin_run_id"] for r in rows})
            return run, rows, [c for o in origins for c in tx.all(q.claims_of_origin, {"origin": o})]

        run, rows, claim_rows = self._fetch(work)
        found = self._records(rows, statuses)
        wanted = {(r.origin_run_id, r.suffix) for r in found}
        owned = [c for c in map(claim_row, claim_rows) if (c.origin_run_id, c.suffix) in wanted]
        claims = {(c.origin_run_id, c.suffix): c for c in owned}
        if run is None:
            return WorklistView(None, found, claims)
        who = (run["condemner_actor"], run["condemner_reason"] or None)
        return WorklistView(run_row(run), found, claims, who)

    def claim_record(
        self,
        run_id: str,
        new: NewRecord,
        *,
        gated: bool,
        durable: bool = False,
        owner: str | None = None,
        ttl: float = 30.0,
    ) -> ToolRecord | None:
        params = {
            "holder": owner,
            "ttl": float(ttl),
            "run": run_id,
            "step_suffix": new.suffix,
            "at_step": new.step,
            "call_id": new.tool_call_id,
            "name": new.tool_name,
            "call_mode": new.mode,
            "call_input": _dump(new.input),
            "origin": new.origin_run_id,
            "rec_status": new.status.value,
            "first_attempts": 0 if new.status is RecordStatus.SUSPENDED else 1,
            "shared_ref": new.shared_id,
            "now": time.time(),
        }
        return self._behind_tombstone_gate(run_id, gated, durable, self._q.record_insert, params)

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
    ) -> ToolRecord | None:
        params = {
            "run": run_id,
            "step_suffix": suffix,
            "expected": expected.value,
            "holder": owner,
            "ttl": float(ttl),
            "seen_attempts": attempts,
            "now": time.time(),
        }
        stmt = self._q.record_reclaim if attempts is None else self._q.record_reclaim_seen
        return self._behind_tombstone_gate(run_id, gated, durable, stmt, params)

    def _behind_tombstone_gate(
        self, run_id: str, gated: bool, durable: bool, stmt: driver.Prepared, params: dict[str, Any]
    ) -> ToolRecord | None:
        """Take the gate, then run one record statement in the same transaction (it may use the
        sequence number as ``at_seq``); None, with nothing written, if the statement changed no row."""

        def work(tx: driver.Tx) -> driver.Row:
            row = tx.one(stmt, {**params, "at_seq": tombstone_gate(tx, self._q, run_id, gated)})
            if row is None:
                raise _Conflict  # roll back the sequence number we took
            return row

        try:
            return record_row(self._write(work, atomic=True, durable=durable))
        except _Conflict:
            return None

    def _settle_params(
        self,
        run_id: str,
        suffix: str,
        expected: RecordStatus,
        status: RecordStatus,
        output: Any,
        error: str | None,
    ) -> dict[str, Any]:
        return {
            "run": run_id,
            "step_suffix": suffix,
            "expected": expected.value,
            "new_status": status.value,
            "new_output": None if output is None else _dump(output),
            "new_error": storable_or_none(error),
            "now": time.time(),
        }

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
    ) -> ToolRecord | None:
        q = self._q
        params = {
            **self._settle_params(run_id, suffix, RecordStatus.RUNNING, status, output, error),
            "exec_trace": traceparent,
            "holder": owner,
            "note": f"{suffix}: settled {status.value} after the tombstone"[:2000],
        }

        def work(tx: driver.Tx) -> driver.Row | None:
            row = tx.one(q.record_settle if owner is None else q.record_settle_owned, params)
            # After the outcome, never before: an unwind that reads the record after this sees it settled.
            tx.execute(q.reopen_unwind, params)
            return row

        row = self._write(work)
        return None if row is None else record_row(row)

    def renew_execution(self, run_id: str, suffix: str, owner: str, ttl: float) -> bool:
        params = {
            "run": run_id,
            "step_suffix": suffix,
            "holder": owner,
            "ttl": float(ttl),
            "now": time.time(),
        }
        return self._write(lambda tx: tx.one(self._q.exec_renew, params)) is not None

    def resolve_record(
        self, run_id: str, suffix: str, expected: RecordStatus, output: Any
    ) -> ToolRecord | None:
        params = self._settle_params(run_id, suffix, expected, RecordStatus.SUCCEEDED, output, None)
        row = self._write(lambda tx: tx.one(self._q.record_settle, params))
        return None if row is None else record_row(row)

    def fork(self, source_run_id: str, step: int, new_run_id: str) -> None:
        q = self._q
        params = {"src": source_run_id, "run": new_run_id, "upto": step, "now": time.time()}

        def work(tx: driver.Tx) -> None:
            source = tx.one(q.fork_lock_source, params)
            if source is None:
                raise UnknownRunError(source_run_id)
            if run_row(source).condemned:
                raise CompensatedRunError(source_run_id)
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


def normalize_url(url: str) -> str:
    """``postgres://`` and ``postgresql://`` mean psycopg 3 here (the driver we install)."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _refuse_missing_sqlite_file(url: str) -> None:
    """SQLite creates a missing file on connect: a read of a mistyped path would make an empty journal
    and list ``runs (0)``. A reader asks for the file to exist first."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    if parsed.database.startswith("file:") or Path(parsed.database).exists():
        return
    raise JournalError(
        f"no journal at {redact_url(url)}: the file does not exist (check SAGA_JOURNAL_URL, or SAGA_HOME "
        "for the embedded default); a command that reads never creates one",
        url=redact_url(url),
    )


def _create_engine(url: str) -> sa.Engine:
    parsed = sa.engine.make_url(normalize_url(url))
    backend = parsed.get_backend_name()
    if backend not in POLICIES:
        raise JournalError(
            f"no journal backend for {redact_url(url)}: use memory://, sqlite:///path.db or postgresql+psycopg://…",
            url=redact_url(url),
        )
    return policy_for(backend).create_engine(parsed, redact_url(url))
