"""Memory: the resident set of a saga worker's pool processes over many unwinds must stay flat.

One-step runs (coordinator, one step task, finalize: every code path of an unwind, three tasks
each) are unwound through a 2-process prefork worker on Redis + PostgreSQL, in batches; after each
batch the RSS of each pool process is read from /proc. Flat = the largest pool process grew by at
most 10% (and at most 8 MiB) between the end of the first tenth of the unwinds and the end.
"""

from __future__ import annotations

import time

from bench.cluster import POLL, Cluster
from bench.common import Row, Table, new_id
from bench.config import Config
from bench.seed import seed
from bench.workers import hwm_kib, rss_kib


def run(cfg: Config) -> list[Table]:
    table = Table(
        "Memory: RSS of the worker's pool processes over many unwinds (Redis + PostgreSQL)",
        caption="RSS read from /proc after each batch; peak = VmHWM at the end",
    )
    if "postgres" not in cfg.backends(["postgres"]):
        return [table]
    total = cfg.rss_unwinds
    batch = max(1, total // 20)
    with Cluster("redis+postgres") as cluster:
        assert cluster.engine is not None
        ids = [new_id("mem") for _ in range(total)]
        seed(cluster.engine, ids, 1)
        pids = cluster.worker.child_pids()
        for _ in range(50):  # warm: every pool process has opened its connections and run each task
            cluster.noop().get(timeout=60, interval=POLL)
        baseline = max(rss_kib(p) for p in pids)
        samples: list[tuple[int, int]] = []  # (unwinds done, largest pool process RSS KiB)
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
    tenth = samples[max(0, len(samples) // 10 - 1)]
    last = samples[-1]
    growth = last[1] - tenth[1]
    flat = growth <= min(0.10 * tenth[1], 8 * 1024)
    table.add(
        Row(
            "RSS of a warm worker, before any unwind",
            baseline / 1024,
            "MiB",
            note="largest of the 2 pool processes, after 50 no-op tasks",
        )
    )
    table.add(
        Row(f"RSS after {tenth[0]:,} unwinds", tenth[1] / 1024, "MiB", note="largest of the 2 pool processes")
    )
    table.add(
        Row(
            f"RSS after {last[0]:,} unwinds",
            last[1] / 1024,
            "MiB",
            "after the first tenth",
            tenth[1] / 1024,
            last[1] / tenth[1],
            "flat (<= +10%, <= +8 MiB)",
            flat,
            f"growth {growth / 1024:+.1f} MiB; peak (VmHWM) {peak / 1024:.1f} MiB; "
            f"{total / elapsed:,.0f} unwinds/s",
        )
    )
    curve = ", ".join(f"{n:,}: {kib / 1024:.1f}" for n, kib in samples[:: max(1, len(samples) // 5)])
    table.caption += f"; MiB by unwinds done: {curve}"
    return [table]
