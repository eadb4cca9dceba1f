"""The floors: what the services themselves cost on this machine, before saga-worker does anything.

Redis SET+GET, a SQLite WAL commit, a PostgreSQL commit (one row each, through the driver), a Celery
no-op task round trip, a chain of 10 no-op tasks, and 2,000 no-op tasks through a 2-process prefork
worker (Redis broker and result backend).
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid

from bench.common import QUEUE_PREFIX, REDIS_URL, Backend, Row, Table, percentile
from bench.config import Config
from bench.workers import Worker


def _latencies(fn: object, samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - start)
    return out


def _lat_row(name: str, lat: list[float], note: str = "") -> Row:
    p50, p99 = statistics.median(lat), percentile(lat, 99)
    scale, unit = (1e6, "µs") if p50 < 1e-3 else (1e3, "ms")
    return Row(
        name,
        p50 * scale,
        f"{unit} p50",
        note=f"p99 {p99 * scale:.1f} {unit}; {len(lat)} samples" + (f"; {note}" if note else ""),
    )


def storage_rows(cfg: Config) -> list[Row]:
    import sqlite3

    import redis

    rows = []
    client = redis.Redis.from_url(REDIS_URL)
    key = f"{QUEUE_PREFIX}:floor:{uuid.uuid4().hex[:6]}"

    def set_get() -> None:
        client.set(key, b"x")
        client.get(key)

    n = 5000 if not cfg.quick else 1000
    lat = _latencies(set_get, n)
    client.delete(key)
    client.close()
    rows.append(_lat_row("Redis SET+GET round trip", lat))

    with tempfile.TemporaryDirectory(prefix="saga-bench-") as tmp:
        conn = sqlite3.connect(f"{tmp}/floor.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # as the SQLite journal opens it
        conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        counter = iter(range(10**9))

        def commit() -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (?, 'x')", (next(counter),))
            conn.execute("COMMIT")

        rows.append(_lat_row("SQLite WAL commit (1-row insert)", _latencies(commit, n), "synchronous=NORMAL"))
        conn.close()

    if "postgres" in cfg.backends(["postgres"]):
        with Backend("postgres") as pg:
            assert pg.engine is not None
            raw = pg.engine.raw_connection()
            cur = raw.cursor()
            cur.execute("CREATE TABLE floor_t (k BIGINT PRIMARY KEY, v TEXT)")
            raw.commit()
            counter = iter(range(10**9))

            def pg_commit() -> None:
                cur.execute("INSERT INTO floor_t VALUES (%s, 'x')", (next(counter),))
                raw.commit()

            setting = cur.execute("SHOW synchronous_commit").fetchone()[0]
            rows.append(
                _lat_row(
                    "PostgreSQL commit (1-row insert)",
                    _latencies(pg_commit, n // 5),
                    f"synchronous_commit={setting}",
                )
            )
            cur.close()
            raw.close()
    return rows


def celery_rows(cfg: Config) -> list[Row]:
    from bench.noop_app import noop

    queue = f"{QUEUE_PREFIX}-noop-{uuid.uuid4().hex[:6]}"
    rows = []
    with Worker("bench.noop_app", [queue], concurrency=2) as worker:
        worker.wait_ready(lambda: noop.apply_async(queue=queue).get(timeout=5))
        for _ in range(20):  # warm both pool processes and the result subscriptions
            noop.apply_async(queue=queue).get(timeout=30)
        lat = _latencies(lambda: noop.apply_async(queue=queue).get(timeout=30), cfg.latency_samples)
        rows.append(_lat_row("Celery no-op task round trip (.delay().get())", lat))
        lat = _latencies(
            lambda: noop_chain(noop, queue, 10).apply_async().get(timeout=60), cfg.latency_samples
        )
        rows.append(_lat_row("Celery chain of 10 no-op tasks", lat))
        rows.append(
            Row(
                f"Celery {cfg.noop_tasks:,} no-op tasks, 2-process prefork worker",
                noop_throughput(noop, queue, cfg.noop_tasks),
                "tasks/s",
                note="all sent, then all results awaited",
            )
        )
    return rows


def noop_chain(task: object, queue: str, length: int) -> object:
    """A fresh chain each time: a reused chain signature keeps its frozen task ids, and its .get()
    would answer at once from the first call's stored result."""
    from celery import chain

    return chain(*[task.si().set(queue=queue) for _ in range(length)])  # type: ignore[attr-defined]


def noop_throughput(task: object, queue: str, count: int) -> float:
    start = time.perf_counter()
    results = [task.apply_async(queue=queue) for _ in range(count)]  # type: ignore[attr-defined]
    for result in results:
        result.get(timeout=120)
    return count / (time.perf_counter() - start)


def run(cfg: Config) -> list[Table]:
    table = Table("Floors: the services themselves on this machine")
    table.rows.extend(storage_rows(cfg))
    table.rows.extend(celery_rows(cfg))
    return [table]
