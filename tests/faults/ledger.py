"""The ground truth of the fault suite: a ledger of every raw hook call and of every effect.

It lives in PostgreSQL tables beside the journal but is reached directly (never through the suite's
TCP proxy): it plays the external provider. ``fault_calls`` logs every raw hook call (kind, key, pid,
start and end on the database clock); ``fault_effects`` holds one row per idempotency key (UNIQUE), the
way a provider deduplicates, so the effect of a key is applied once however often its hook runs.
``fault_reports`` keeps every report saga-worker handed back, for the checker.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

import psycopg

DDL = """
CREATE TABLE IF NOT EXISTS fault_calls (
    id bigserial PRIMARY KEY, kind text NOT NULL, key text NOT NULL, step text NOT NULL, pid int NOT NULL,
    started_at double precision NOT NULL, ended_at double precision, outcome text);
CREATE TABLE IF NOT EXISTS fault_effects (
    key text PRIMARY KEY, kind text NOT NULL, step text NOT NULL, pid int NOT NULL,
    applied_at double precision NOT NULL);
CREATE TABLE IF NOT EXISTS fault_reports (
    id bigserial PRIMARY KEY, run_id text NOT NULL, pid int NOT NULL, at double precision NOT NULL,
    report text NOT NULL);
CREATE INDEX IF NOT EXISTS ix_fault_calls_step ON fault_calls (step);
"""
NOW = "extract(epoch from clock_timestamp())::double precision"


def dsn(url: str) -> str:
    """A libpq DSN from a SQLAlchemy URL (``postgresql+psycopg://`` → ``postgresql://``)."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@dataclass(frozen=True)
class Call:
    id: int
    kind: str
    key: str
    step: str
    pid: int
    started_at: float
    ended_at: float | None
    outcome: str | None


@dataclass(frozen=True)
class Effect:
    key: str
    kind: str
    step: str
    pid: int
    applied_at: float


class Ledger:
    """One process's handle on the ledger; reconnects after a fork or a lost connection."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: psycopg.Connection[Any] | None = None
        self._pid = 0

    def _c(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._pid != os.getpid() or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(dsn(self.url), autocommit=True, connect_timeout=5)
            self._pid = os.getpid()
        return self._conn

    def _exec(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        for attempt in range(3):
            try:
                cur = self._c().execute(sql, args)
                return cur.fetchall() if cur.description else []
            except psycopg.OperationalError:
                self._conn = None
                if attempt == 2:
                    raise
                time.sleep(0.2)
        return []

    def setup(self) -> None:
        self._exec(DDL)

    def reset(self) -> None:
        self._exec("TRUNCATE fault_calls, fault_effects, fault_reports RESTART IDENTITY")

    def close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    # -- what hooks do -----------------------------------------------------------------------------
    def begin_call(self, kind: str, key: str, step: str) -> int:
        rows = self._exec(
            f"INSERT INTO fault_calls (kind, key, step, pid, started_at) VALUES (%s, %s, %s, %s, {NOW}) "
            "RETURNING id",
            (kind, key, step, os.getpid()),
        )
        return int(rows[0][0])

    def end_call(self, call_id: int, outcome: str) -> None:
        self._exec(f"UPDATE fault_calls SET ended_at = {NOW}, outcome = %s WHERE id = %s", (outcome, call_id))

    def apply(self, kind: str, key: str, step: str) -> bool:
        """The effect, once per key: False when the provider already has it (deduplicated)."""
        rows = self._exec(
            f"INSERT INTO fault_effects (key, kind, step, pid, applied_at) VALUES (%s, %s, %s, %s, {NOW}) "
            "ON CONFLICT (key) DO NOTHING RETURNING key",
            (key, kind, step, os.getpid()),
        )
        return bool(rows)

    def has_effect(self, key: str) -> bool:
        return bool(self._exec("SELECT 1 FROM fault_effects WHERE key = %s", (key,)))

    def count_calls(self, key: str) -> int:
        return int(self._exec("SELECT count(*) FROM fault_calls WHERE key = %s", (key,))[0][0])

    def add_report(self, run_id: str, report: dict[str, Any]) -> None:
        self._exec(
            f"INSERT INTO fault_reports (run_id, pid, at, report) VALUES (%s, %s, {NOW}, %s)",
            (run_id, os.getpid(), json.dumps(report)),
        )

    def now(self) -> float:
        return float(self._exec(f"SELECT {NOW}")[0][0])

    def in_flight(self, kind: str) -> list[int]:
        """The pids of the ``kind`` hook calls begun and not ended (still inside, or died inside)."""
        return [
            int(r[0])
            for r in self._exec("SELECT pid FROM fault_calls WHERE kind = %s AND ended_at IS NULL", (kind,))
        ]

    # -- what the checker reads --------------------------------------------------------------------
    def calls(self, kind: str | None = None) -> list[Call]:
        rows = self._exec(
            "SELECT id, kind, key, step, pid, started_at, ended_at, outcome FROM fault_calls "
            + ("WHERE kind = %s " if kind else "")
            + "ORDER BY id",
            (kind,) if kind else (),
        )
        return [Call(*r) for r in rows]

    def effects(self, kind: str | None = None) -> list[Effect]:
        rows = self._exec(
            "SELECT key, kind, step, pid, applied_at FROM fault_effects "
            + ("WHERE kind = %s " if kind else "")
            + "ORDER BY applied_at",
            (kind,) if kind else (),
        )
        return [Effect(*r) for r in rows]

    def reports(self) -> list[tuple[str, float, dict[str, Any]]]:
        rows = self._exec("SELECT run_id, at, report FROM fault_reports ORDER BY at, id")
        return [(r[0], float(r[1]), json.loads(r[2])) for r in rows]


class MemLedger(Ledger):
    """The same ledger in memory, on a given clock, for in-process tests (the stateful machine)."""

    def __init__(self, clock: Any = time.time) -> None:
        super().__init__("memory://")
        self.clock = clock
        self._calls: list[Call] = []
        self._effects: dict[str, Effect] = {}
        self._reports: list[tuple[str, float, dict[str, Any]]] = []

    def setup(self) -> None:
        pass

    def reset(self) -> None:
        self._calls.clear()
        self._effects.clear()
        self._reports.clear()

    def close(self) -> None:
        pass

    def begin_call(self, kind: str, key: str, step: str) -> int:
        self._calls.append(Call(len(self._calls) + 1, kind, key, step, os.getpid(), self.clock(), None, None))
        return len(self._calls)

    def end_call(self, call_id: int, outcome: str) -> None:
        c = self._calls[call_id - 1]
        self._calls[call_id - 1] = Call(
            c.id, c.kind, c.key, c.step, c.pid, c.started_at, self.clock(), outcome
        )

    def apply(self, kind: str, key: str, step: str) -> bool:
        if key in self._effects:
            return False
        self._effects[key] = Effect(key, kind, step, os.getpid(), self.clock())
        return True

    def has_effect(self, key: str) -> bool:
        return key in self._effects

    def count_calls(self, key: str) -> int:
        return sum(1 for c in self._calls if c.key == key)

    def add_report(self, run_id: str, report: dict[str, Any]) -> None:
        self._reports.append((run_id, self.clock(), report))

    def now(self) -> float:
        return float(self.clock())

    def in_flight(self, kind: str) -> list[int]:
        return [c.pid for c in self._calls if c.kind == kind and c.ended_at is None]

    def calls(self, kind: str | None = None) -> list[Call]:
        return [c for c in self._calls if kind is None or c.kind == kind]

    def effects(self, kind: str | None = None) -> list[Effect]:
        return sorted(
            (e for e in self._effects.values() if kind is None or e.kind == kind), key=lambda e: e.applied_at
        )

    def reports(self) -> list[tuple[str, float, dict[str, Any]]]:
        return list(self._reports)
