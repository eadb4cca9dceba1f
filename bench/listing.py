"""The console's runs listing on 10^6 runs: a page must cost what it costs on ten.

``python -m bench.listing [--runs 1000000] [--backends postgres,sqlite]``

Seeds a journal (a database or file of its own, migrated to the newest schema) with ``--runs``
runs of the shape the library writes (1 in 10 condemned, 1 in 1,000 flagged ``attention``, 1 in 1,000
``incomplete``: the inbox's stuck lane, a few failed), then times each listing query the console sends, 25 times each, median in ms, next to
its floor: the same page read by primary key (``run_id = ?``, one row per statement, repeated for a
page's 50 rows would be 50x this; the floor here is one such read, the cheapest statement there
is). And, for contrast, the page that an OFFSET listing would read at the same depth.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from saga_worker.journal import open_journal
from saga_worker.journal.records import RunQuery, RunStatus, UnwindState
from saga_worker.journal.sql import SqlJournal
from saga_worker.operating.inbox import inbox

from .common import PG_ADMIN_URL

REPEAT = 25


def seed_sql(n: int) -> str:
    """Server-side rows: no client round trip per run. Every run updated at a distinct time."""
    return f"""
    INSERT INTO saga_runs (run_id, status, prompt, text, error, condemned_at, next_seq, source_run_id,
                           unwind_state, unwind_attempts, unwind_next_at, unwind_note, created_at, updated_at)
    SELECT 'order-' || lpad(i::text, 7, '0'),
           CASE WHEN i % 50 = 0 THEN 'failed' ELSE 'finished' END,
           '', '', NULL,
           CASE WHEN i % 10 = 0 THEN 1.7e9 + i ELSE NULL END,
           3, NULL,
           CASE WHEN i % 1000 = 0 THEN 'attention' WHEN i % 1000 = 500 THEN 'incomplete'
                WHEN i % 10 = 0 THEN 'complete' ELSE 'none' END,
           CASE WHEN i % 1000 = 0 THEN 8 ELSE 0 END, NULL, NULL,
           1.7e9 + i, 1.7e9 + i + 0.5
    FROM generate_series(1, {n}) AS i
    """


def seed_sqlite(engine: sa.Engine, n: int) -> None:
    rows = []
    for i in range(1, n + 1):
        condemned = i % 10 == 0
        rows.append(
            (
                f"order-{i:07d}",
                "failed" if i % 50 == 0 else "finished",
                1.7e9 + i if condemned else None,
                "attention"
                if i % 1000 == 0
                else "incomplete"
                if i % 1000 == 500
                else "complete"
                if condemned
                else "none",
                8 if i % 1000 == 0 else 0,
                1.7e9 + i,
                1.7e9 + i + 0.5,
            )
        )
    raw = engine.raw_connection()
    try:
        raw.cursor().executemany(
            "INSERT INTO saga_runs (run_id, status, prompt, text, condemned_at, next_seq, unwind_state, "
            "unwind_attempts, created_at, updated_at) VALUES (?, ?, '', '', ?, 3, ?, ?, ?, ?)",
            rows,
        )
        raw.commit()
        raw.cursor().execute("ANALYZE")
    finally:
        raw.close()


def timed(fn: Callable[[], object]) -> float:
    samples = []
    for _ in range(REPEAT):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def measure(journal: SqlJournal, n: int) -> list[tuple[str, float]]:
    deep_run = journal.get_run(f"order-{n // 10:07d}")  # 90% of the way down, newest first
    assert deep_run is not None
    deep = (deep_run.updated_at, deep_run.run_id)
    cases: list[tuple[str, RunQuery]] = [
        ("first page, no filter", RunQuery()),
        ("page at 90% depth (keyset)", RunQuery(before=deep)),
        ("condemned, first page", RunQuery(condemned=True)),
        ("condemned, at 90% depth", RunQuery(condemned=True, before=deep)),
        ("attention (1 in 1,000), first page", RunQuery(unwind_state=UnwindState.ATTENTION)),
        ("attention, at 90% depth", RunQuery(unwind_state=UnwindState.ATTENTION, before=deep)),
        ("status failed, at 90% depth", RunQuery(status=RunStatus.FAILED, before=deep)),
        ("id prefix 'order-00012' (100 runs)", RunQuery(search="order-00012")),
        ("id prefix 'order-' (every run)", RunQuery(search="order-")),
    ]
    out = [("floor: one run by primary key", timed(lambda: journal.get_run(deep_run.run_id)))]
    for name, query in cases:
        out.append((name, timed(lambda q=query: journal.page_runs(q))))  # type: ignore[misc]
    offset = sa.text("SELECT * FROM saga_runs ORDER BY updated_at DESC, run_id DESC LIMIT 50 OFFSET :o")

    def by_offset() -> None:
        with journal.engine.connect() as conn:
            conn.execute(offset, {"o": n * 9 // 10}).fetchall()

    out.append(("contrast: OFFSET page at 90% depth", timed(by_offset)))
    out.append(("attention gauge (count)", timed(lambda: journal.count_runs(UnwindState.ATTENTION))))
    # The whole inbox as the console's page and /api/inbox read it: every kind, and the stuck lane
    # (1 in 1,000 runs incomplete: each read with its steps), plus the queued requests' scan.
    out.append(("inbox, every kind and the stuck lane", timed(lambda: inbox(journal))))
    return out


def run_postgres(n: int) -> list[tuple[str, float]]:
    name = f"saga_bench_listing_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        journal = open_journal(url, migrate=True)
        assert isinstance(journal, SqlJournal)
        with journal.engine.begin() as conn:
            conn.execute(sa.text(seed_sql(n)))
        with journal.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE saga_runs"))
        try:
            return measure(journal, n)
        finally:
            journal.close()
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def run_sqlite(n: int) -> list[tuple[str, float]]:
    with tempfile.TemporaryDirectory(prefix="saga-bench-listing-") as folder:
        journal = open_journal(f"sqlite:///{Path(folder) / 'journal.db'}")
        assert isinstance(journal, SqlJournal)
        seed_sqlite(journal.engine, n)
        try:
            return measure(journal, n)
        finally:
            journal.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.listing", description=__doc__)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--backends", default="postgres,sqlite")
    args = parser.parse_args(argv)
    for backend in args.backends.split(","):
        started = time.perf_counter()
        rows = {"postgres": run_postgres, "sqlite": run_sqlite}[backend](args.runs)
        print(f"\n{backend}, {args.runs:,} runs (seed + measure {time.perf_counter() - started:.0f} s)")
        print("| query (a page of 50) | median ms |\n|---|---|")
        for name, ms in rows:
            print(f"| {name} | {ms:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
