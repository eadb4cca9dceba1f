"""Memory: the resident set of a saga worker's pool processes over many unwinds must stay flat.

One-step runs (the coordinator, then one step task that also assembles the report: every code
path of an unwind, two tasks each) are unwound through a 2-process prefork worker on Redis +
PostgreSQL, in batches; after each batch the RSS of each pool process is read from /proc. RSS
saw-tooths while Python's cyclic
collector lets garbage pile up between full collections, so flat is judged on the envelope: the
highest RSS seen in the second half of the unwinds is at most 10% above the highest in the first
half. A control run with a full ``gc.collect()`` after every task (bench/gc_after_task.py) shows
how much of the level is collectable garbage rather than live memory.
"""

from __future__ import annotations

import time

from bench.cluster import POLL, Cluster
from bench.common import Row, Table, new_id
from bench.config import Config
from bench.seed import seed
from bench.workers import hwm_kib, rss_kib


def _unwinds(total: int, include: str) -> tuple[int, list[tuple[int, int]], int, float]:
    """(warm RSS, [(unwinds done, largest pool RSS)], peak VmHWM, unwinds/s), all in KiB."""
    batch = max(1, total // 20)
    with Cluster("redis+postgres", include=include) as cluster:
        assert cluster.engine is not None
        ids = [new_id("mem") for _ in range(total)]
        seed(cluster.engine, ids, 1)
        pids = cluster.worker.child_pids()
        for _ in range(50):  # warm: every pool process has opened its connections and run each task
            cluster.noop().get(timeout=60, interval=POLL)
        baseline = max(rss_kib(p) for p in pids)
        samples: list[tuple[int, int]] = []
        start = time.perf_counter()
        for offset in range(0, total, batch):
            results = [cluster.unwind(run_id) for run_id in ids[offset : offset + batch]]
            for result in results:
                report = result.get(timeout=300, interval=POLL)
                assert report["entries"][0]["status"] == "compensated", report
            samples.append((offset + len(results), max(rss_kib(p) for p in pids)))
        elapsed = time.perf_counter() - start
        assert cluster.worker.child_pids() == pids, "a pool process was replaced: RSS would not be comparable"
        peak = max(hwm_kib(p) for p in pids)
    return baseline, samples, peak, total / elapsed


def run(cfg: Config) -> list[Table]:
    table = Table(
        "Memory: RSS of the worker's pool processes over many unwinds (Redis + PostgreSQL, 1-step runs)",
        caption="largest of the 2 pool processes, read from /proc after each twentieth of the unwinds",
    )
    if "postgres" not in cfg.backends(["postgres"]):
        return [table]
    total = cfg.rss_unwinds
    baseline, samples, peak, speed = _unwinds(total, "bench.noop_tasks")
    half = len(samples) // 2
    first, second = max(s[1] for s in samples[:half]), max(s[1] for s in samples[half:])
    table.add(
        Row("RSS of a warm worker, before any unwind", baseline / 1024, "MiB", note="after 50 no-op tasks")
    )
    table.add(
        Row(
            f"highest RSS, unwinds {samples[half - 1][0] + 1:,}..{total:,}",
            second / 1024,
            "MiB",
            f"highest, unwinds 1..{samples[half - 1][0]:,}",
            first / 1024,
            second / first,
            "flat (<= 1.10x)",
            second <= 1.10 * first,
            f"end {samples[-1][1] / 1024:.0f} MiB; VmHWM {peak / 1024:.0f} MiB; {speed:,.0f} unwinds/s",
        )
    )
    curve = ", ".join(f"{n:,}: {kib / 1024:.0f}" for n, kib in samples[:: max(1, len(samples) // 10)])
    table.caption += f"; MiB by unwinds done: {curve}"
    control = max(1, total // 4)
    c_base, c_samples, c_peak, _ = _unwinds(control, "bench.gc_after_task")
    table.add(
        Row(
            f"control: gc.collect() after every task, after {control:,} unwinds",
            c_samples[-1][1] / 1024,
            "MiB",
            "warm",
            c_base / 1024,
            c_samples[-1][1] / c_base,
            note=f"highest {max(s[1] for s in c_samples) / 1024:.0f} MiB: the level above is collectable cyclic "
            "garbage, not a leak",
        )
    )
    return [table]
