"""The SQL journal (SQLAlchemy Core): SQLite for the embedded default, PostgreSQL for production.

Concurrency rests on two habits. Every insert is insert-if-absent judged by ``RETURNING`` (with
psycopg 3, ``ON CONFLICT DO NOTHING`` reports a row count of -1, so a row count cannot tell who won).
Every state change is an ``UPDATE … WHERE <expected state>``, which PostgreSQL re-checks after taking
the row lock and SQLite runs inside ``BEGIN IMMEDIATE`` (one writer at a time, with a busy timeout).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from ..errors import CompensatedRunError, JournalError, MalformedRecordError, RunExistsError, UnknownRunError
from ..keys import canonical_json
from . import guards, migrate
from .base import Journal
from .records import (
    ClaimAttempt,
    ClaimStatus,
    CompensationClaim,
    NewRecord,
    RecordStatus,
    RunInfo,
    RunStatus,
    ToolRecord,
    UnwindInfo,
    UnwindState,
)
from .schema import claims, decisions, records, runs, unwind_entries, unwinds

SQLITE_BUSY_TIMEOUT_S = 30.0


class _Conflict(Exception):
    """Raised inside a transaction to roll it back when an insert-if-absent lost its race."""


def _dump(value: Any) -> str:
    return canonical_json(value)


def _load(text: str | None, run_id: str, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise MalformedRecordError(run_id, what, f"stored value is not JSON ({exc})") from exc


def _enum(kind: Any, value: str, run_id: str, what: str) -> Any:
    try:
        return kind(value)
    except ValueError as exc:
        raise MalformedRecordError(run_id, what, f"unknown status {value!r}") from exc


class SqlJournal(Journal):
    """A journal in a SQL database. Every process that opens the same URL sees the same journal."""

    def __init__(
        self, url: str, *, migrate_schema: bool | None = None, engine: sa.Engine | None = None
    ) -> None:
        self.url = url
        self.engine = engine if engine is not None else _create_engine(url)
        self.dialect = self.engine.dialect.name
        self._insert = postgresql.insert if self.dialect == "postgresql" else sqlite.insert
        if migrate_schema is None:
            migrate_schema = self.dialect == "sqlite"
        try:
            current = migrate.current_revision(self.engine)
            if current != migrate.head_revision():
                if not migrate_schema:
                    raise JournalError(
                        f"journal at {_safe(url)} has schema revision {current or 'none'}, expected "
                        f"{migrate.head_revision()}: run `saga-worker db upgrade`",
                        url=_safe(url),
                    )
                migrate.upgrade(self.engine)
        except sa.exc.OperationalError as exc:
            self.engine.dispose()
            raise JournalError(f"cannot open journal {_safe(url)}: {exc.orig}", url=_safe(url)) from exc

    def close(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"SqlJournal({_safe(self.url)!r})"

    # -- execution guards (see Journal.execution_guard) -------------------------------------------
    def _try_guard(self, run_id: str, suffix: str) -> object | None:
        if self.dialect == "postgresql":
            return guards.pg_try(self.engine, run_id, suffix)
        database = self.engine.url.database
        if self.dialect == "sqlite" and database and guards.file_guards_supported():
            return guards.file_try(f"{database}.exec-guards", run_id, suffix)
        return super()._try_guard(run_id, suffix)  # in-process only, where the OS offers no such lock

    def _release_guard(self, token: object) -> None:
        if isinstance(token, guards.PgGuard):
            guards.pg_release(token)
        elif isinstance(token, int):
            guards.file_release(token)
        else:
            super()._release_guard(token)

    # -- plumbing ---------------------------------------------------------------------------------
    @contextmanager
    def _tx(self) -> Iterator[sa.Connection]:
        with self.engine.begin() as conn:
            yield conn

    def _insert_if_absent(self, table: sa.Table, keys: dict[str, Any], **values: Any) -> sa.Row[Any]:
        """Insert a row unless one with these keys exists; return the stored row (the first writer wins),
        so a retried or duplicated write is harmless."""
        with self._tx() as conn:
            conn.execute(
                self._insert(table).values(**keys, **values).on_conflict_do_nothing(index_elements=list(keys))
            )
            where = [table.c[name] == value for name, value in keys.items()]
            return conn.execute(sa.select(table).where(*where)).one()

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        with self.engine.connect() as conn:
            conn = conn.execution_options(saga_read_only=True)
            with conn.begin():
                yield conn

    def _now_sql(self) -> sa.ColumnElement[float]:
        # PostgreSQL's clock, not the worker's: leases must not depend on skewed worker clocks.
        if self.dialect == "postgresql":
            return sa.cast(sa.func.extract("epoch", sa.func.clock_timestamp()), sa.Double)
        return sa.literal(time.time(), sa.Double)

    def now(self) -> float:
        if self.dialect != "postgresql":
            return time.time()
        with self._read() as conn:
            return float(conn.execute(sa.select(self._now_sql())).scalar_one())

    # -- rows to values ---------------------------------------------------------------------------
    @staticmethod
    def _run(row: sa.Row[Any]) -> RunInfo:
        m = row._mapping
        return RunInfo(
            run_id=m["run_id"],
            status=_enum(RunStatus, m["status"], m["run_id"], "run status"),
            prompt=m["prompt"],
            text=m["text"],
            error=m["error"],
            condemned_at=m["condemned_at"],
            created_at=m["created_at"],
            updated_at=m["updated_at"],
            source_run_id=m["source_run_id"],
            unwind_state=_enum(UnwindState, m["unwind_state"], m["run_id"], "unwind state"),
            unwind_attempts=m["unwind_attempts"],
            unwind_next_at=m["unwind_next_at"],
            unwind_note=m["unwind_note"],
        )

    @staticmethod
    def _record(row: sa.Row[Any]) -> ToolRecord:
        m = row._mapping
        rid, what = m["run_id"], f"{m['suffix']!r}"
        return ToolRecord(
            run_id=rid,
            suffix=m["suffix"],
            seq=m["seq"],
            step=m["step"],
            tool_call_id=m["tool_call_id"],
            tool_name=m["tool_name"],
            mode=m["mode"],
            input=_load(m["input"], rid, what + " input"),
            status=_enum(RecordStatus, m["status"], rid, what),
            output=_load(m["output"], rid, what + " output"),
            error=m["error"],
            attempts=m["attempts"],
            origin_run_id=m["origin_run_id"],
            created_at=m["created_at"],
            updated_at=m["updated_at"],
        )

    @staticmethod
    def _claim(row: sa.Row[Any]) -> CompensationClaim:
        m = row._mapping
        return CompensationClaim(
            origin_run_id=m["origin_run_id"],
            suffix=m["suffix"],
            status=_enum(ClaimStatus, m["status"], m["origin_run_id"], f"compensation {m['suffix']!r}"),
            owner=m["owner"],
            lease_expires_at=m["lease_expires_at"],
            attempts=m["attempts"],
            idempotency_key=m["idempotency_key"],
            via_run_id=m["via_run_id"],
            error=m["error"],
            started_at=m["started_at"],
            finished_at=m["finished_at"],
        )

    # -- runs -------------------------------------------------------------------------------------
    def start_run(self, run_id: str, prompt: str) -> tuple[RunInfo, bool]:
        now = time.time()
        with self._tx() as conn:
            ins = (
                self._insert(runs)
                .values(
                    run_id=run_id,
                    status=RunStatus.RUNNING.value,
                    prompt=prompt,
                    text="",
                    created_at=now,
                    updated_at=now,
                )
                .on_conflict_do_nothing(index_elements=["run_id"])
                .returning(*runs.c)
            )
            row = conn.execute(ins).first()
            if row is not None:
                return self._run(row), True
            run = self._run(conn.execute(sa.select(runs).where(runs.c.run_id == run_id)).one())
        if run.condemned:
            raise CompensatedRunError(run_id)
        return run, False

    def get_run(self, run_id: str) -> RunInfo | None:
        with self._read() as conn:
            row = conn.execute(sa.select(runs).where(runs.c.run_id == run_id)).first()
        return None if row is None else self._run(row)

    def list_runs(self, *, limit: int = 100, condemned_only: bool = False) -> list[RunInfo]:
        query = sa.select(runs).order_by(runs.c.updated_at.desc(), runs.c.run_id.desc()).limit(limit)
        if condemned_only:
            query = query.where(runs.c.condemned_at.is_not(None))
        with self._read() as conn:
            return [self._run(r) for r in conn.execute(query)]

    def end_run(self, run_id: str, status: RunStatus, text: str, error: str | None) -> RunInfo:
        with self._tx() as conn:
            conn.execute(
                sa.update(runs)
                .where(runs.c.run_id == run_id, runs.c.status == RunStatus.RUNNING.value)
                .values(status=status.value, text=text, error=error, updated_at=time.time())
            )
            row = conn.execute(sa.select(runs).where(runs.c.run_id == run_id)).first()
        if row is None:
            raise UnknownRunError(run_id)
        return self._run(row)

    def condemn(self, run_id: str) -> float:
        now = self._now_sql()
        with self._tx() as conn:
            # Three tries: on PostgreSQL a run started concurrently is invisible to the UPDATE, then makes
            # the INSERT a no-op once it commits; the next UPDATE (a fresh snapshot) sees it and stamps it.
            for _ in range(3):
                stamped = conn.execute(
                    sa.update(runs)
                    .where(runs.c.run_id == run_id, runs.c.condemned_at.is_(None))
                    .values(
                        condemned_at=now,
                        updated_at=now,
                        unwind_state=UnwindState.PENDING.value,
                        unwind_next_at=now,
                    )
                    .returning(runs.c.condemned_at)
                ).scalar()
                if stamped is not None:
                    return float(stamped)
                made = conn.execute(
                    self._insert(runs)
                    .values(
                        run_id=run_id,
                        status=RunStatus.UNKNOWN.value,
                        prompt="",
                        text="",
                        condemned_at=now,
                        unwind_state=UnwindState.PENDING.value,
                        unwind_next_at=now,
                        created_at=now,
                        updated_at=now,
                    )
                    .on_conflict_do_nothing(index_elements=["run_id"])
                    .returning(runs.c.condemned_at)
                ).scalar()
                if made is not None:
                    return float(made)
                kept = conn.execute(sa.select(runs.c.condemned_at).where(runs.c.run_id == run_id)).scalar()
                if kept is not None:
                    return float(kept)
        raise JournalError(
            f"run {run_id!r}: could not write its tombstone (its row kept changing)", run_id=run_id
        )

    # -- decisions --------------------------------------------------------------------------------
    def record_decision(self, run_id: str, step: int, payload: Any) -> Any:
        row = self._insert_if_absent(
            decisions, {"run_id": run_id, "step": step}, payload=_dump(payload), created_at=time.time()
        )
        return _load(row.payload, run_id, f"decision {step}")

    def list_decisions(self, run_id: str) -> list[Any]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(decisions.c.step, decisions.c.payload)
                .where(decisions.c.run_id == run_id)
                .order_by(decisions.c.step)
            ).all()
        return [_load(payload, run_id, f"decision {step}") for step, payload in rows]

    # -- records ----------------------------------------------------------------------------------
    def get_record(self, run_id: str, suffix: str) -> ToolRecord | None:
        with self._read() as conn:
            row = conn.execute(
                sa.select(records).where(records.c.run_id == run_id, records.c.suffix == suffix)
            ).first()
        return None if row is None else self._record(row)

    def list_records(self, run_id: str, statuses: Sequence[RecordStatus] | None = None) -> list[ToolRecord]:
        query = sa.select(records).where(records.c.run_id == run_id).order_by(records.c.seq)
        if statuses is not None:
            query = query.where(records.c.status.in_([s.value for s in statuses]))
        with self._read() as conn:
            return [self._record(r) for r in conn.execute(query)]

    def _gate(self, conn: sa.Connection, run_id: str, gated: bool) -> int:
        """Lock the run's row and take the next sequence number, refusing a condemned run if ``gated``.

        This row lock is what orders a claim against the tombstone: ``condemn`` updates the same row,
        so whichever commits second sees the other."""
        query = sa.update(runs).where(runs.c.run_id == run_id)
        if gated:
            query = query.where(runs.c.condemned_at.is_(None))
        seq = conn.execute(query.values(next_seq=runs.c.next_seq + 1).returning(runs.c.next_seq)).scalar()
        if seq is not None:
            return int(seq)
        exists = conn.execute(sa.select(runs.c.run_id).where(runs.c.run_id == run_id)).first()
        if exists is None:
            raise UnknownRunError(run_id)
        raise CompensatedRunError(run_id)

    def claim_record(self, run_id: str, new: NewRecord, *, gated: bool) -> ToolRecord | None:
        now = time.time()
        try:
            with self._tx() as conn:
                seq = self._gate(conn, run_id, gated)
                row = conn.execute(
                    self._insert(records)
                    .values(
                        run_id=run_id,
                        suffix=new.suffix,
                        seq=seq,
                        step=new.step,
                        tool_call_id=new.tool_call_id,
                        tool_name=new.tool_name,
                        mode=new.mode,
                        input=_dump(new.input),
                        status=RecordStatus.RUNNING.value,
                        attempts=1,
                        origin_run_id=new.origin_run_id,
                        created_at=now,
                        updated_at=now,
                    )
                    .on_conflict_do_nothing(index_elements=["run_id", "suffix"])
                    .returning(*records.c)
                ).first()
                if row is None:
                    raise _Conflict
                return self._record(row)
        except _Conflict:
            return None

    def _cas(
        self, conn: sa.Connection, run_id: str, suffix: str, expected: RecordStatus, **values: Any
    ) -> ToolRecord | None:
        row = conn.execute(
            sa.update(records)
            .where(records.c.run_id == run_id, records.c.suffix == suffix, records.c.status == expected.value)
            .values(updated_at=time.time(), **values)
            .returning(*records.c)
        ).first()
        return None if row is None else self._record(row)

    def reclaim_record(
        self, run_id: str, suffix: str, expected: RecordStatus, *, gated: bool
    ) -> ToolRecord | None:
        try:
            with self._tx() as conn:
                self._gate(conn, run_id, gated)
                record = self._cas(
                    conn,
                    run_id,
                    suffix,
                    expected,
                    status=RecordStatus.RUNNING.value,
                    attempts=records.c.attempts + 1,
                    error=None,
                )
                if record is None:
                    raise _Conflict
                return record
        except _Conflict:
            return None

    def complete_record(
        self, run_id: str, suffix: str, status: RecordStatus, *, output: Any = None, error: str | None = None
    ) -> ToolRecord | None:
        with self._tx() as conn:
            return self._cas(
                conn,
                run_id,
                suffix,
                RecordStatus.RUNNING,
                status=status.value,
                output=None if output is None else _dump(output),
                error=error,
            )

    def resolve_record(
        self, run_id: str, suffix: str, expected: RecordStatus, output: Any
    ) -> ToolRecord | None:
        with self._tx() as conn:
            return self._cas(
                conn,
                run_id,
                suffix,
                expected,
                status=RecordStatus.SUCCEEDED.value,
                output=None if output is None else _dump(output),
                error=None,
            )

    def fork(self, source_run_id: str, step: int, new_run_id: str) -> None:
        now = time.time()
        with self._tx() as conn:
            # Lock the source's row, as a claim does, so a concurrent condemn is ordered against the fork.
            source = conn.execute(
                sa.update(runs)
                .where(runs.c.run_id == source_run_id)
                .values(next_seq=runs.c.next_seq)
                .returning(*runs.c)
            ).first()
            if source is None:
                raise UnknownRunError(source_run_id)
            src = self._run(source)
            if src.condemned:
                raise CompensatedRunError(source_run_id)
            created = conn.execute(
                self._insert(runs)
                .values(
                    run_id=new_run_id,
                    status=RunStatus.RUNNING.value,
                    prompt=src.prompt,
                    text="",
                    next_seq=source._mapping["next_seq"],
                    source_run_id=source_run_id,
                    created_at=now,
                    updated_at=now,
                )
                .on_conflict_do_nothing(index_elements=["run_id"])
                .returning(runs.c.run_id)
            ).first()
            if created is None:
                target = conn.execute(
                    sa.select(runs.c.condemned_at).where(runs.c.run_id == new_run_id)
                ).first()
                if target is not None and target[0] is not None:
                    raise CompensatedRunError(new_run_id)
                raise RunExistsError(new_run_id)
            conn.execute(
                decisions.insert().from_select(
                    ["run_id", "step", "payload", "created_at"],
                    sa.select(
                        sa.literal(new_run_id), decisions.c.step, decisions.c.payload, sa.literal(now)
                    ).where(decisions.c.run_id == source_run_id, decisions.c.step <= step),
                )
            )
            copied = [c for c in records.c if c.name != "run_id"]
            conn.execute(
                records.insert().from_select(
                    ["run_id", *[c.name for c in copied]],
                    sa.select(sa.literal(new_run_id), *copied).where(
                        records.c.run_id == source_run_id, records.c.step <= step
                    ),
                )
            )

    # -- compensation claims ----------------------------------------------------------------------
    def get_claim(self, origin_run_id: str, suffix: str) -> CompensationClaim | None:
        with self._read() as conn:
            row = conn.execute(
                sa.select(claims).where(claims.c.origin_run_id == origin_run_id, claims.c.suffix == suffix)
            ).first()
        return None if row is None else self._claim(row)

    def get_claims(
        self, origin_and_suffixes: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CompensationClaim]:
        if not origin_and_suffixes:
            return {}
        wanted = set(origin_and_suffixes)
        origins = sorted({o for o, _ in wanted})
        with self._read() as conn:
            rows = conn.execute(
                sa.select(claims).where(
                    claims.c.origin_run_id.in_(origins), claims.c.suffix.in_(sorted({s for _, s in wanted}))
                )
            )
            found = [self._claim(r) for r in rows]
        return {(c.origin_run_id, c.suffix): c for c in found if (c.origin_run_id, c.suffix) in wanted}

    def _claim_statements(self) -> dict[str, Any]:
        """The per-step claim statements, built once with bind parameters: building a Core statement
        and its cache key anew costs more than SQLite's whole commit, on the hottest path we have."""
        cached: dict[str, Any] | None = getattr(self, "_claim_stmts", None)
        if cached is not None:
            return cached
        b = sa.bindparam
        # PostgreSQL leases use the server's clock; SQLite's is this machine's, bound per call.
        now = self._now_sql() if self.dialect == "postgresql" else b("now", type_=sa.Double)
        pk = (claims.c.origin_run_id == b("o"), claims.c.suffix == b("s"))
        mine = (*pk, claims.c.owner == b("holder"), claims.c.status == ClaimStatus.CLAIMED.value)
        # The same owner may take its own claim back: a redelivered task re-drives its dead attempt.
        takeable = sa.or_(
            claims.c.status == ClaimStatus.FAILED.value,
            sa.and_(
                claims.c.status == ClaimStatus.CLAIMED.value,
                sa.or_(claims.c.lease_expires_at < now, claims.c.owner == b("holder")),
            ),
        )
        stmts = {
            "insert": self._insert(claims)
            .values(
                origin_run_id=b("o"),
                suffix=b("s"),
                status=ClaimStatus.CLAIMED.value,
                owner=b("holder"),
                lease_expires_at=now + b("ttl", type_=sa.Double),
                attempts=1,
                idempotency_key=b("key"),
                via_run_id=b("via"),
                started_at=now,
            )
            .on_conflict_do_nothing(index_elements=["origin_run_id", "suffix"])
            .returning(*claims.c),
            "take": sa.update(claims)
            .where(*pk, takeable)
            .values(
                status=ClaimStatus.CLAIMED.value,
                owner=b("holder"),
                lease_expires_at=now + b("ttl", type_=sa.Double),
                attempts=claims.c.attempts + 1,
                via_run_id=b("via"),
                error=None,
                started_at=now,
                finished_at=None,
            )
            .returning(*claims.c),
            "get": sa.select(claims).where(*pk),
            "renew": sa.update(claims)
            .where(*mine)
            .values(lease_expires_at=now + b("ttl", type_=sa.Double))
            .returning(claims.c.owner),
            "finish": sa.update(claims)
            .where(*mine)
            .values(status=b("new_status"), error=b("error_text"), finished_at=now)
            .returning(claims.c.owner),
        }
        self._claim_stmts = stmts
        return stmts

    def _claim_params(self, **params: Any) -> dict[str, Any]:
        if self.dialect != "postgresql":
            params["now"] = time.time()
        return params

    def claim_compensation(
        self,
        origin_run_id: str,
        suffix: str,
        *,
        via_run_id: str,
        owner: str,
        ttl: float,
        idempotency_key: str,
    ) -> ClaimAttempt:
        stmts = self._claim_statements()
        params = self._claim_params(
            o=origin_run_id, s=suffix, holder=owner, ttl=float(ttl), key=idempotency_key, via=via_run_id
        )
        with self._tx() as conn:
            row = conn.execute(stmts["insert"], params).first()
            if row is not None:
                return ClaimAttempt(True, self._claim(row))
            row = conn.execute(stmts["take"], params).first()
            if row is not None:
                return ClaimAttempt(True, self._claim(row))
            current = conn.execute(stmts["get"], params).first()
        return ClaimAttempt(False, None if current is None else self._claim(current))

    def renew_claim(self, origin_run_id: str, suffix: str, owner: str, ttl: float) -> bool:
        stmt = self._claim_statements()["renew"]
        with self._tx() as conn:
            row = conn.execute(
                stmt, self._claim_params(o=origin_run_id, s=suffix, holder=owner, ttl=float(ttl))
            ).first()
        return row is not None

    def finish_claim(
        self, origin_run_id: str, suffix: str, owner: str, status: ClaimStatus, error: str | None = None
    ) -> bool:
        stmt = self._claim_statements()["finish"]
        params = self._claim_params(
            o=origin_run_id, s=suffix, holder=owner, new_status=status.value, error_text=error
        )
        with self._tx() as conn:
            row = conn.execute(stmt, params).first()
        return row is not None

    # -- unwind bookkeeping -----------------------------------------------------------------------
    def set_unwind_state(
        self,
        run_id: str,
        state: UnwindState,
        *,
        note: str | None = None,
        next_at: float | None = None,
        count_attempt: bool = False,
    ) -> None:
        with self._tx() as conn:
            conn.execute(
                sa.update(runs)
                .where(runs.c.run_id == run_id)
                .values(
                    unwind_state=state.value,
                    unwind_note=note,
                    unwind_next_at=next_at,
                    updated_at=time.time(),
                    unwind_attempts=runs.c.unwind_attempts + (1 if count_attempt else 0),
                )
            )

    def runs_to_sweep(self, now: float, *, limit: int = 100) -> list[RunInfo]:
        query = (
            sa.select(runs)
            .where(
                runs.c.unwind_state.in_([UnwindState.PENDING.value, UnwindState.INCOMPLETE.value]),
                runs.c.condemned_at.is_not(None),
                sa.func.coalesce(runs.c.unwind_next_at, 0.0) <= now,
            )
            .order_by(runs.c.unwind_next_at)
            .limit(limit)
        )
        with self._read() as conn:
            return [self._run(r) for r in conn.execute(query)]

    # -- distributed unwinds ----------------------------------------------------------------------
    @staticmethod
    def _unwind(row: sa.Row[Any]) -> UnwindInfo:
        m = row._mapping
        suffixes = _load(m["suffixes"], m["run_id"], f"unwind {m['unwind_id']!r} worklist")
        return UnwindInfo(
            unwind_id=m["unwind_id"],
            run_id=m["run_id"],
            dry_run=bool(m["dry_run"]),
            suffixes=tuple(suffixes),
            created_at=m["created_at"],
        )

    def record_unwind(
        self, unwind_id: str, run_id: str, *, dry_run: bool, suffixes: Sequence[str]
    ) -> UnwindInfo:
        row = self._insert_if_absent(
            unwinds,
            {"unwind_id": unwind_id},
            run_id=run_id,
            dry_run=bool(dry_run),
            suffixes=_dump(list(suffixes)),
            created_at=time.time(),
        )
        return self._unwind(row)

    def get_unwind(self, unwind_id: str) -> UnwindInfo | None:
        with self._read() as conn:
            row = conn.execute(sa.select(unwinds).where(unwinds.c.unwind_id == unwind_id)).first()
        return None if row is None else self._unwind(row)

    def record_unwind_entry(self, unwind_id: str, position: int, entry: dict[str, Any]) -> dict[str, Any]:
        row = self._insert_if_absent(
            unwind_entries,
            {"unwind_id": unwind_id, "position": position},
            entry=_dump(entry),
            created_at=time.time(),
        )
        return _load(row.entry, unwind_id, f"unwind entry {position}")  # type: ignore[no-any-return]

    def list_unwind_entries(self, unwind_id: str) -> dict[int, dict[str, Any]]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(unwind_entries.c.position, unwind_entries.c.entry)
                .where(unwind_entries.c.unwind_id == unwind_id)
                .order_by(unwind_entries.c.position)
            ).all()
        return {int(p): _load(e, unwind_id, f"unwind entry {p}") for p, e in rows}


def _safe(url: str) -> str:
    """The URL with any password hidden, for messages; otherwise as written (rendering escapes ':')."""
    try:
        parsed = sa.engine.make_url(url)
        return url if parsed.password is None else parsed.render_as_string(hide_password=True)
    except Exception:
        return "<unparseable URL>"


def normalize_url(url: str) -> str:
    """``postgres://`` and ``postgresql://`` mean psycopg 3 here (the driver we install)."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _create_engine(url: str) -> sa.Engine:
    parsed = sa.engine.make_url(normalize_url(url))
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(parsed, _safe(url))
    if backend == "postgresql":
        if parsed.get_driver_name() != "psycopg":
            raise JournalError(
                f"PostgreSQL journals use psycopg 3: write the URL as postgresql+psycopg://… "
                f"(got {_safe(url)})",
                url=_safe(url),
            )
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:
            raise JournalError(
                f"PostgreSQL journal {_safe(url)} needs psycopg 3: pip install 'saga-worker[postgres]'",
                url=_safe(url),
            ) from exc
        return sa.create_engine(parsed, pool_pre_ping=True, pool_size=5, max_overflow=10)
    raise JournalError(
        f"no journal backend for {_safe(url)}: use memory://, sqlite:///path.db or postgresql+psycopg://…",
        url=_safe(url),
    )


def _sqlite_engine(parsed: sa.URL, url: str) -> sa.Engine:
    database = parsed.database
    if not database or database == ":memory:":
        # An in-memory SQLite database lives and dies with one connection: no other process could share it.
        raise JournalError(
            f"SQLite journal {url} is in memory: a SQLite journal needs a file "
            "(sqlite:///path.db); use memory:// for an in-process one",
            url=url,
        )
    path = Path(database)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise JournalError(f"cannot create the folder of SQLite journal {url}: {exc}", url=url) from exc
    engine = sa.create_engine(
        parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False}
    )

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let us issue BEGIN ourselves (pysqlite's own BEGIN is deferred and comes too late).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        # IMMEDIATE takes the write lock up front: a read-then-write transaction can never be
        # overtaken between its read and its write, which is what our compare-and-set relies on.
        # Straight on the driver: going through SQLAlchemy's execute costs more than the BEGIN itself.
        read_only = conn.get_execution_options().get("saga_read_only", False)
        driver = conn.connection.driver_connection
        assert driver is not None
        driver.execute("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine
