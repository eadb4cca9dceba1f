"""Fill a journal fast: the rows ``run_durable`` (and ``compensate_run``) would write, in bulk.

Recording 10^6 tool calls through ``run_durable`` would take the whole bench budget, so runs are
written straight into the tables with bulk inserts (``executemany`` on SQLite, ``COPY`` on
PostgreSQL). The rows have exactly the shape the library writes; ``check_seed`` proves it by
comparing a seeded run with a recorded one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import sqlalchemy as sa

from saga_worker import Journal, Tool, ToolCall, run_durable, scripted
from saga_worker.core.keys import canonical_json
from saga_worker.journal.schema import claims, decisions, records, runs


def noop(*_args: object) -> dict[str, bool]:
    return {"ok": True}


def noop_tools(count: int = 5) -> dict[str, Tool]:
    return {f"t{i}": Tool(execute=noop, compensate=noop) for i in range(count)}


def tool_name(i: int, tools: int = 5) -> str:
    return f"t{i % tools}"


def record_run(journal: Journal, run_id: str, steps: int, tools: Mapping[str, Tool]) -> None:
    """A run of ``steps`` one-call decisions, recorded by the library itself."""
    calls = [ToolCall(tool_name(i, len(tools)), {"i": i}) for i in range(steps)]
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*calls), max_steps=steps + 1)


def _rows(
    run_id: str, steps: int, compensated: bool, now: float
) -> tuple[tuple[Any, ...], list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    ok = canonical_json({"ok": True})
    run = (
        run_id,
        "finished",
        "",
        "",
        None,
        now if compensated else None,
        steps,
        None,
        "complete" if compensated else "none",
        0,
        None,
        None,
        now,
        now,
    )
    decs = []
    recs = []
    comps = []
    for i in range(steps):
        call_id = f"call-{i + 1}"
        name = tool_name(i)
        payload = {"kind": "calls", "calls": [{"id": call_id, "tool": name, "input": {"i": i}}]}
        decs.append((run_id, i + 1, canonical_json(payload), now))
        recs.append(
            (
                run_id,
                call_id,
                i + 1,
                i + 1,
                call_id,
                name,
                "call",
                canonical_json({"i": i}),
                "succeeded",
                ok,
                None,
                1,
                run_id,
                now,
                now,
            )
        )
        if compensated:
            comps.append(
                (
                    run_id,
                    call_id,
                    "compensated",
                    "seed",
                    now + 30.0,
                    1,
                    f"{run_id}:comp:{call_id}",
                    run_id,
                    None,
                    now,
                    now,
                )
            )
    decs.append((run_id, steps + 1, canonical_json({"kind": "finish", "text": "", "error": None}), now))
    return run, decs, recs, comps


RUN_COLUMNS = [
    "run_id",
    "status",
    "prompt",
    "text",
    "error",
    "condemned_at",
    "next_seq",
    "source_run_id",
    "unwind_state",
    "unwind_attempts",
    "unwind_next_at",
    "unwind_note",
    "created_at",
    "updated_at",
]
# By name: a column added later (shared_id, migration 0004) keeps its default, as for a plain call.
RECORD_COLUMNS = [
    "run_id",
    "suffix",
    "seq",
    "step",
    "tool_call_id",
    "tool_name",
    "mode",
    "input",
    "status",
    "output",
    "error",
    "attempts",
    "origin_run_id",
    "created_at",
    "updated_at",
]
# By name too: the boot clock's lease columns (added later, SQLite's) stay NULL, as PostgreSQL writes them.
CLAIM_COLUMNS = [c.name for c in claims.c if not c.name.startswith("lease_boot_")]
TABLES: list[tuple[sa.Table, list[str]]] = [
    (runs, RUN_COLUMNS),
    (decisions, ["run_id", "step", "payload", "created_at"]),
    (records, RECORD_COLUMNS),
    (claims, CLAIM_COLUMNS),
]


def _batches(run_ids: Iterable[str], steps: int, compensated: bool) -> Iterator[list[list[tuple[Any, ...]]]]:
    now = time.time()
    batch: list[list[tuple[Any, ...]]] = [[], [], [], []]
    for n, run_id in enumerate(run_ids, start=1):
        run, decs, recs, comps = _rows(run_id, steps, compensated, now)
        batch[0].append(run)
        batch[1].extend(decs)
        batch[2].extend(recs)
        batch[3].extend(comps)
        if len(batch[2]) >= 20_000 or n % 5_000 == 0:
            yield batch
            batch = [[], [], [], []]
    if batch[0]:
        yield batch


# A PostgreSQL journal in service has a history: runs unwound before, with their claims, their
# distributed unwinds' rows and entries, their audit rows. Without one, the ANALYZE below finds the
# tables an unwind writes empty, the generic plans psycopg's prepared statements settle on after five
# runs seq-scan them, and each later unwind pays for the rows the measured ones add, until autovacuum
# analyzes them again (a minute at most in service, never within a bench run): measured, a step's read
# 515 µs instead of 167 µs once 5,000 claims were added unanalyzed (bench/history/2026-12-03-to-06.md, issue 26).
HISTORY_RUNS = 2_000


def seed(engine: sa.Engine, run_ids: Iterable[str], steps: int, *, compensated: bool = False) -> None:
    """Write finished runs of ``steps`` succeeded no-op calls (already unwound if ``compensated``); on
    PostgreSQL, the first time, a history of ``HISTORY_RUNS`` runs unwound before them too."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        postgres = engine.dialect.name == "postgresql"
        if not postgres:
            cursor.execute("BEGIN IMMEDIATE")
        elif cursor.execute("SELECT NOT EXISTS (SELECT 1 FROM saga_unwinds)").fetchone()[0]:
            _history(cursor, steps)
        for batch in _batches(run_ids, steps, compensated):
            _write(cursor, batch, postgres)
        if postgres:
            raw.commit()
            cursor.execute("ANALYZE")
            raw.commit()
        else:
            cursor.execute("COMMIT")
            cursor.execute("ANALYZE")
        cursor.close()
    finally:
        raw.close()


def _write(cursor: Any, batch: list[list[tuple[Any, ...]]], postgres: bool) -> None:
    for (table, columns), rows in zip(TABLES, batch, strict=True):
        if not rows:
            continue
        names = ", ".join(columns)
        if postgres:
            with cursor.copy(f"COPY {table.name} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join("?" * len(columns))
            cursor.executemany(f"INSERT INTO {table.name} ({names}) VALUES ({marks})", rows)


def _history(cursor: Any, steps: int) -> None:
    """``HISTORY_RUNS`` runs unwound by the executor before the measured ones (PostgreSQL): the runs
    with their claims, an unwind row and an entry per step each, and their audit rows."""
    ids = [f"history-{n:06d}" for n in range(HISTORY_RUNS)]
    for batch in _batches(ids, steps, True):
        _write(cursor, batch, True)
    now = time.time()
    suffixes = [f"call-{i}" for i in range(steps, 0, -1)]
    with cursor.copy(
        "COPY saga_unwinds (unwind_id, run_id, dry_run, suffixes, created_at, actor, reason, via, run_epoch) "
        "FROM STDIN"
    ) as copy:
        for run_id in ids:
            copy.write_row(
                (f"unwind-{run_id}", run_id, False, canonical_json(suffixes), now, "seed", "", "worker", 0)
            )
    with cursor.copy("COPY saga_unwind_entries (unwind_id, position, entry, created_at) FROM STDIN") as copy:
        for run_id in ids:
            for position, suffix in enumerate(suffixes):
                entry = {"suffix": suffix, "status": "compensated", "origin_run_id": run_id}
                copy.write_row((f"unwind-{run_id}", position, canonical_json(entry), now))
    with cursor.copy(
        "COPY saga_audit (run_id, at, action, actor, via, reason, detail, event_key) FROM STDIN"
    ) as copy:
        for run_id in ids:
            copy.write_row((run_id, now, "condemned", "seed", "worker", "", "{}", None))
            unwound = f"unwound:unwind-{run_id}"
            copy.write_row((run_id, now, "unwound", "seed", "worker", "", '{"complete": true}', unwound))


def check_seed(journal: Journal, engine: sa.Engine) -> None:
    """Fail loudly if seeded rows differ from what the library writes (times and owners aside)."""
    tools = noop_tools()
    record_run(journal, "seedcheck-recorded", 3, tools)
    seed(engine, ["seedcheck-seeded"], 3)
    skip = {"run_id", "origin_run_id", "created_at", "updated_at", "exec_owner", "exec_lease_expires_at"}
    with engine.connect() as conn:
        for table, _ in TABLES[:3]:
            got = []
            for rid in ("seedcheck-recorded", "seedcheck-seeded"):
                key = table.c.run_id
                order = [c for c in table.primary_key.columns]
                rows = conn.execute(sa.select(table).where(key == rid).order_by(*order)).all()
                got.append([{k: v for k, v in r._mapping.items() if k not in skip} for r in rows])
            if got[0] != got[1]:
                raise AssertionError(
                    f"seeded {table.name} rows differ from recorded ones:\n{got[0]}\n{got[1]}"
                )
