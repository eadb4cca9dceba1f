"""Where a distributed unwind's CPU goes, by process: the worker's main process, its pool
children, the PostgreSQL server, Redis and this client (issue 26's bound on the 1.3x target).

On a 2-core machine a sequential unwind is bound by CPU rather than by round trips: every process
of the cluster shares the two cores. Read from ``/proc/<pid>/stat`` (user + system time, whatever
the process ran) around rounds of sequential unwinds, alternating saga-worker's unwind, the
contract's bare tasks (``bench.noop_tasks``) and a 7-task no-op chain on the same worker, so each
figure is CPU per unit of work and the three are comparable. The worker's own processes are
counted by pid; the servers by name (``postgres``, ``redis-server``): on a quiet machine that is
the cluster's work.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cluster import POLL, Cluster
from bench.common import Row, new_id
from bench.config import Config
from bench.seed import seed

STEPS = 5
CHAIN = 7
TICKS = os.sysconf("SC_CLK_TCK")
GROUPS = ("worker main", "pool children", "postgres", "redis", "bench client")


def _cpu_by_group(worker_pid: int, children: set[int]) -> dict[str, float]:
    """Seconds of CPU each group has used so far (live processes only)."""
    used: dict[str, float] = defaultdict(float)
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        seconds = (int(fields[11]) + int(fields[12])) / TICKS
        if pid == worker_pid:
            used["worker main"] += seconds
        elif pid in children:
            used["pool children"] += seconds
        elif pid == me:
            used["bench client"] += seconds
        elif name == "postgres":
            used["postgres"] += seconds
        elif name.startswith("redis-server"):
            used["redis"] += seconds
    return used


def cpu_rows(cluster: Cluster, cfg: Config) -> list[Row]:
    assert cluster.engine is not None
    per_round = 20 if cfg.quick else 50
    rounds = 2 if cfg.quick else 4
    ours = [new_id("cpu") for _ in range(per_round * rounds + 3)]
    bare = [new_id("cpub") for _ in ours]
    seed(cluster.engine, ours + bare, STEPS)
    worker_pid = cluster.worker.proc.pid
    children = set(cluster.worker.child_pids())
    for run_id, bare_id in zip(ours[:3], bare[:3], strict=True):  # connections warmed
        cluster.unwind(run_id).get(timeout=120, interval=POLL)
        cluster.contract_unwind(bare_id).get(timeout=120, interval=POLL)
    kinds: dict[str, Callable[[str], Any]] = {
        "saga-worker unwind": lambda run_id: cluster.unwind(run_id),
        "the contract's bare tasks": lambda run_id: cluster.contract_unwind(run_id),
        f"{CHAIN}-task no-op chain": lambda _run_id: cluster.noop_chain(CHAIN),
    }
    chain = [""] * (per_round * rounds)  # a chain takes no run
    ids = dict(zip(kinds, (ours[3:], bare[3:], chain), strict=True))
    used: dict[str, dict[str, float]] = {kind: defaultdict(float) for kind in kinds}
    wall: dict[str, float] = defaultdict(float)
    for r in range(rounds):
        for kind, send in kinds.items():
            todo = ids[kind][r * per_round : (r + 1) * per_round]
            before, start = _cpu_by_group(worker_pid, children), time.perf_counter()
            for run_id in todo:
                send(run_id).get(timeout=120, interval=POLL)
            wall[kind] += time.perf_counter() - start
            after = _cpu_by_group(worker_pid, children)
            for group in GROUPS:
                used[kind][group] += after[group] - before[group]
    n = per_round * rounds
    bare_total = sum(used["the contract's bare tasks"].values()) / n
    rows = []
    for kind in kinds:
        total = sum(used[kind].values()) / n
        split = ", ".join(f"{g} {used[kind][g] / n * 1e3:.1f}" for g in GROUPS)
        busy = sum(used[kind].values()) / (wall[kind] * (os.cpu_count() or 1))
        rows.append(
            Row(
                f"redis+postgres: CPU per {kind} (sequential), all processes",
                total * 1e3,
                "ms CPU",
                floor_name="the contract's bare tasks",
                floor=bare_total * 1e3,
                ratio=total / bare_total if bare_total else None,
                note=f"{split} ms; wall {wall[kind] / n * 1e3:.1f} ms each, the cores {busy:.0%} busy; {n} of each",
            )
        )
    return rows
