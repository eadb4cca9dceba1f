"""The floor of the in-process figures: the bare journal writes a step needs, and nothing else.

The same statements the SQL journal commits, on the same tables of the same database, one
transaction each (each must be durable before the next move: the claim before the hook runs, the
outcome after), straight through the driver: no reads, no SQLAlchemy, no Python bookkeeping.

Unwinding a run of n steps needs 2n + 2 commits: the tombstone, a claim and an outcome per step,
and the unwind state at the end. Recording it needs 3n + 3: the run, a decision per step plus the
final one, a claim (sequence number and record, one transaction) and an outcome per call, the end.
The tombstone and the claims of these (non-idempotent) calls are durable as the journal makes them:
on SQLite ``synchronous=FULL`` for that commit, the others lazy; on PostgreSQL the session commits
with ``synchronous_commit=off`` and a durable transaction waits for the flush (``SET LOCAL
synchronous_commit TO DEFAULT``), and a commit of one statement is that statement in autocommit,
as the journal sends it (no ``BEGIN`` or ``COMMIT`` round trip).
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from saga_worker.core.keys import canonical_json


class BareWriter:
    def __init__(self, engine: sa.Engine) -> None:
        self.postgres = engine.dialect.name == "postgresql"
        self.raw = engine.raw_connection()
        self.cursor = self.raw.cursor()
        if self.postgres:
            self.cursor.execute("SET synchronous_commit TO off")
            self.raw.commit()
            self.raw.driver_connection.autocommit = True

    def close(self) -> None:
        if self.postgres:
            self.raw.driver_connection.autocommit = False  # as the pool expects it back
        self.cursor.close()
        self.raw.close()

    def _commit(self, *statements: tuple[str, tuple[Any, ...]], durable: bool = False) -> None:
        cur = self.cursor
        if self.postgres:
            alone = len(statements) == 1 and not durable  # autocommit: the statement commits itself
            if not alone:
                cur.execute("BEGIN")
            if durable:
                cur.execute("SET LOCAL synchronous_commit TO DEFAULT")
            for sql, params in statements:
                cur.execute(sql.replace("?", "%s"), params)
            if not alone:
                cur.execute("COMMIT")
        else:
            if durable:
                cur.execute("PRAGMA synchronous=FULL")
            cur.execute("BEGIN IMMEDIATE")
            for sql, params in statements:
                cur.execute(sql, params)
            cur.execute("COMMIT")
            if durable:
                cur.execute("PRAGMA synchronous=NORMAL")

    def unwind(self, run_id: str, steps: int) -> None:
        now = time.time()
        self._commit(
            (
                "UPDATE saga_runs SET condemned_at=?, unwind_state='pending', unwind_next_at=?, updated_at=? "
                "WHERE run_id=? AND condemned_at IS NULL",
                (now, now, now, run_id),
            ),
            durable=True,
        )
        for i in range(steps, 0, -1):
            suffix = f"call-{i}"
            self._commit(
                (
                    "INSERT INTO saga_compensations (origin_run_id, suffix, status, owner, lease_expires_at, "
                    "attempts, idempotency_key, via_run_id, started_at) VALUES (?, ?, 'claimed', 'bare', ?, 1, "
                    "?, ?, ?) ON CONFLICT (origin_run_id, suffix) DO NOTHING",
                    (run_id, suffix, now + 30.0, f"{run_id}:comp:{suffix}", run_id, now),
                )
            )
            self._commit(
                (
                    "UPDATE saga_compensations SET status='compensated', finished_at=? WHERE origin_run_id=? "
                    "AND suffix=? AND owner='bare' AND status='claimed'",
                    (time.time(), run_id, suffix),
                )
            )
        self._commit(
            (
                "UPDATE saga_runs SET unwind_state='complete', updated_at=? WHERE run_id=?",
                (time.time(), run_id),
            )
        )

    def plan(self, run_id: str) -> None:
        """The reads a dry run cannot do without: the run's records and their compensation claims."""
        cur = self.cursor
        p = "%s" if self.postgres else "?"
        if not self.postgres:
            cur.execute("BEGIN")
        cur.execute(
            f"SELECT * FROM saga_tool_records WHERE run_id={p} AND status IN ('succeeded', 'failed', "
            f"'running') ORDER BY seq",
            (run_id,),
        )
        cur.fetchall()
        cur.execute(f"SELECT * FROM saga_compensations WHERE origin_run_id={p}", (run_id,))
        cur.fetchall()
        if not self.postgres:  # PostgreSQL: two autocommit reads, each a fresh look as the journal's
            cur.execute("COMMIT")

    def record(self, run_id: str, steps: int) -> None:
        now = time.time()
        self._commit(
            (
                "INSERT INTO saga_runs (run_id, status, prompt, text, created_at, updated_at) "
                "VALUES (?, 'running', '', '', ?, ?) ON CONFLICT (run_id) DO NOTHING",
                (run_id, now, now),
            )
        )
        ok = canonical_json({"ok": True})
        for i in range(steps):
            call_id = f"call-{i + 1}"
            payload = canonical_json(
                {"kind": "calls", "calls": [{"id": call_id, "tool": "t0", "input": {"i": i}}]}
            )
            self._commit(
                (
                    "INSERT INTO saga_decisions (run_id, step, payload, created_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (run_id, step) DO NOTHING",
                    (run_id, i + 1, payload, now),
                )
            )
            self._commit(
                (
                    "UPDATE saga_runs SET next_seq = next_seq + 1 WHERE run_id=? AND condemned_at IS NULL",
                    (run_id,),
                ),
                (
                    "INSERT INTO saga_tool_records (run_id, suffix, seq, step, tool_call_id, tool_name, mode, input, "
                    "status, attempts, origin_run_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 't0', 'call', ?, "
                    "'running', 1, ?, ?, ?) ON CONFLICT (run_id, suffix) DO NOTHING",
                    (run_id, call_id, i + 1, i + 1, call_id, canonical_json({"i": i}), run_id, now, now),
                ),
                durable=True,
            )
            self._commit(
                (
                    "UPDATE saga_tool_records SET status='succeeded', output=?, updated_at=? WHERE run_id=? "
                    "AND suffix=? AND status='running'",
                    (ok, time.time(), run_id, call_id),
                )
            )
        self._commit(
            (
                "INSERT INTO saga_decisions (run_id, step, payload, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (run_id, step) DO NOTHING",
                (run_id, steps + 1, canonical_json({"kind": "finish", "text": "", "error": None}), now),
            )
        )
        self._commit(
            (
                "UPDATE saga_runs SET status='finished', updated_at=? WHERE run_id=? AND status='running'",
                (time.time(), run_id),
            )
        )
