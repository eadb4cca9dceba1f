"""Loaded into a worker (``-I bench.child_profile``) to see where a pool child's CPU goes: each pool
child runs under cProfile (CPU time) from its start, and writes its stats to ``$SAGA_BENCH_PROFILE_DIR/<pid>.prof``
after every 50th task (so a worker killed at the end leaves them). ``python -m bench.child_profile``
drives it: a worker of the distributed group, sequential 5-step unwinds, then the contract's bare
tasks, each under a fresh worker, and prints the top of each profile (cumulative and own time)."""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from celery.signals import task_postrun, worker_process_init

from bench.noop_tasks import noop  # noqa: F401  (the worker still needs bench.noop)

_profiler: cProfile.Profile | None = None
_tasks = 0


@worker_process_init.connect
def _start(**_: Any) -> None:
    global _profiler
    if os.environ.get("SAGA_BENCH_PROFILE_DIR"):
        _profiler = cProfile.Profile(time.process_time)  # CPU, not the wait for a task
        _profiler.enable()


@task_postrun.connect
def _dump(**_: Any) -> None:
    global _tasks
    _tasks += 1
    if _profiler is not None and _tasks % 50 == 0:
        _profiler.disable()
        _profiler.dump_stats(str(Path(os.environ["SAGA_BENCH_PROFILE_DIR"]) / f"{os.getpid()}.prof"))
        _profiler.enable()


def _drive(kind: str, runs: int, out: Path) -> None:
    from bench.cluster import POLL, Cluster
    from bench.common import new_id
    from bench.seed import seed

    os.environ["SAGA_BENCH_PROFILE_DIR"] = str(out)
    with Cluster("redis+postgres", include="bench.noop_tasks,bench.child_profile") as cluster:
        assert cluster.engine is not None
        ids = [new_id("cprof") for _ in range(runs + 20)]
        seed(cluster.engine, ids, 5)
        for run_id in ids:
            send = cluster.unwind if kind == "saga" else cluster.contract_unwind
            send(run_id).get(timeout=30, interval=POLL)
    del os.environ["SAGA_BENCH_PROFILE_DIR"]


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 45
    for kind in ("saga", "bare"):
        out = Path(tempfile.mkdtemp(prefix=f"saga-cprof-{kind}-"))
        _drive(kind, runs, out)
        files = [str(p) for p in out.glob("*.prof")]
        stats = pstats.Stats(*files)
        print(
            f"==== {kind}: {runs} unwinds, {len(files)} pool children, {getattr(stats, 'total_tt', 0.0):.3f} s profiled"
        )
        stats.sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    main()
