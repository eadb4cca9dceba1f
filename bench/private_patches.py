"""What the private patch of Celery pays on a distributed unwind (issue 45: keep one only where it
pays more than 5%; bench/history/2026-12-07-issue-45.md has what a dropped one paid).

Two workers side by side on the redis+postgres setup, each on its own queue and journal: one as
saga-worker runs (the patch applied), one with Celery's own result text
(``saga_worker/celery/result_text.py`` taken back). Rounds of sequential 5-step unwinds alternate
among them; each figure is the CPU of the worker's own processes (its main process and its pool
children, where the patches act; ``bench.cpu_by_process``) per unwind, so another process's load on
the machine weighs on none of them (the servers are left out: other sessions' tests share them), and
the wall time per unwind beside it.

    python -m bench.private_patches [--rounds 6] [--per-round 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from contextlib import ExitStack

from rich.console import Console
from rich.table import Table as RichTable

from bench.cluster import POLL, Cluster
from bench.common import new_id
from bench.cpu_by_process import _cpu_by_group
from bench.seed import seed

STEPS = 5
WORKER = ("worker main", "pool children")
SETUPS = {
    "as shipped": "",
    "Celery's own result text": "saferepr",
}


def _cluster(stock: str) -> Cluster:
    os.environ["SAGA_BENCH_STOCK"] = stock
    try:
        return Cluster("redis+postgres", include="bench.noop_tasks,bench.stock_celery")
    finally:
        del os.environ["SAGA_BENCH_STOCK"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per-round", type=int, default=30)
    args = parser.parse_args()
    with ExitStack() as stack:
        clusters = {name: stack.enter_context(_cluster(stock)) for name, stock in SETUPS.items()}
        ids: dict[str, list[str]] = {}
        for name, cluster in clusters.items():
            assert cluster.engine is not None
            ids[name] = [new_id("patch") for _ in range(args.rounds * args.per_round + 3)]
            seed(cluster.engine, ids[name], STEPS)
            for run_id in ids[name][:3]:  # connections warmed
                cluster.unwind(run_id).get(timeout=120, interval=POLL)
        cpu: dict[str, list[float]] = {name: [] for name in clusters}
        wall: dict[str, list[float]] = {name: [] for name in clusters}
        for r in range(args.rounds):
            order = list(clusters) if r % 2 == 0 else list(reversed(clusters))
            for name in order:
                cluster = clusters[name]
                pids = (cluster.worker.proc.pid, set(cluster.worker.child_pids()))
                todo = ids[name][3 + r * args.per_round : 3 + (r + 1) * args.per_round]
                before, start = _cpu_by_group(*pids), time.perf_counter()
                for run_id in todo:
                    cluster.unwind(run_id).get(timeout=120, interval=POLL)
                elapsed = time.perf_counter() - start
                after = _cpu_by_group(*pids)
                used = sum(after[g] - before[g] for g in WORKER)
                cpu[name].append(used / len(todo) * 1e3)
                wall[name].append(elapsed / len(todo) * 1e3)
    shipped = list(SETUPS)[0]
    table = RichTable(
        title=f"private patches: sequential {STEPS}-step unwinds, redis+postgres, {args.rounds} rounds of {args.per_round}"
    )
    for column in (
        "setup",
        "worker CPU ms / unwind (median)",
        "÷ as shipped",
        "wall ms / unwind (median)",
        "÷ as shipped",
    ):
        table.add_column(column)
    base_cpu, base_wall = statistics.median(cpu[shipped]), statistics.median(wall[shipped])
    for name in clusters:
        c, w = statistics.median(cpu[name]), statistics.median(wall[name])
        table.add_row(name, f"{c:.1f}", f"{c / base_cpu:.3f}", f"{w:.1f}", f"{w / base_wall:.3f}")
    Console().print(table)
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
