"""Where the CPU goes when in-process unwinds run side by side on PostgreSQL: per compensation, the
unwinding processes' own CPU and the server's (its backends for this database, read from
``/proc/<pid>/stat``), one process at a time against N at once, same run.

What it explains: on a 2-core machine N processes can at best share the cores that one process and
its backend took turns on, so N ÷ one is bounded by 2 × (CPU per compensation alone ÷ CPU per
compensation at N). Each process first unwinds a run of its own (a worker connects once in its
life), and its backend is read while its connection is still open. The server must be on this
machine (the bench's loopback PostgreSQL).

    python -m bench.concurrency_cpu --runs 400 --rounds 3
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from bench.common import Backend
from bench.seed import noop_tools, seed
from saga_worker import compensate_run, open_journal

STEPS = 5
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Phase:
    processes: int
    compensations_per_second: float
    client_us: float  # the unwinding processes' CPU per compensation
    server_us: float  # their backends' CPU per compensation


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def _unwinder(
    url: str, run_ids: Sequence[str], warm: str, ready: Any, go: Any, spent: Any, leave: Any
) -> None:
    journal = open_journal(url)
    tools = noop_tools()
    try:
        assert compensate_run(warm, journal=journal, tools=tools).complete
        ready.release()
        go.wait()
        began = time.process_time()
        for run_id in run_ids:
            assert compensate_run(run_id, journal=journal, tools=tools).complete
        spent.put(time.process_time() - began)
        leave.wait()  # the backend stays until the parent has read its CPU
    finally:
        journal.close()


def _phase(url: str, admin: sa.Engine, run_ids: list[str], warms: Sequence[str]) -> Phase:
    n = len(warms)
    ctx = multiprocessing.get_context("fork")
    ready, go, leave, spent = ctx.Semaphore(0), ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_unwinder, args=(url, run_ids[i::n], warms[i], ready, go, spent, leave))
        for i in range(n)
    ]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            ready.acquire()
        database = sa.engine.make_url(url).database
        with admin.connect() as conn:
            backends = [
                pid
                for (pid,) in conn.execute(
                    sa.text(
                        "SELECT pid FROM pg_stat_activity WHERE datname = :db AND pid <> pg_backend_pid()"
                    ),
                    {"db": database},
                )
            ]
        before = {pid: _cpu_seconds(pid) for pid in backends}
        began = time.perf_counter()
        go.set()
        client = sum(spent.get() for _ in procs)
        wall = time.perf_counter() - began
        server = sum(_cpu_seconds(pid) - cpu for pid, cpu in before.items())
    finally:
        leave.set()
        for p in procs:
            p.join()
    compensations = len(run_ids) * STEPS
    return Phase(n, compensations / wall, client / compensations * 1e6, server / compensations * 1e6)


def measure(runs: int, rounds: int, counts: Sequence[int] = (1, 8)) -> list[list[Phase]]:
    """``rounds`` rounds, each a phase per process count in turn, ``runs`` five-step runs a phase."""
    with Backend("postgres") as backend:
        phases = rounds * len(counts)
        ids = [[f"cpu-{p}-{i:05d}" for i in range(runs)] for p in range(phases)]
        warms = [[f"cpu-warm-{p}-{i:03d}" for i in range(max(counts))] for p in range(phases)]
        assert backend.engine is not None
        seed(backend.engine, [r for batch in ids + warms for r in batch], STEPS)
        backend.journal.close()
        admin = sa.create_engine(backend.url, isolation_level="AUTOCOMMIT")
        try:
            it = iter(zip(ids, warms, strict=True))
            out = []
            for _ in range(rounds):
                row = []
                for n in counts:
                    batch, batch_warms = next(it)
                    row.append(_phase(backend.url, admin, batch, batch_warms[:n]))
                out.append(row)
            return out
        finally:
            admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.concurrency_cpu", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", default="1,8", help="comma-separated process counts")
    args = parser.parse_args()
    counts = tuple(int(n) for n in args.processes.split(","))
    got = measure(args.runs, args.rounds, counts)
    print(
        f"PostgreSQL, {args.runs} five-step runs a phase, medians of {args.rounds} rounds (load {os.getloadavg()[0]:.1f})"
    )
    print(f"{'processes':>9}  {'comp/s':>7}  {'÷ N=1':>6}  {'client µs/comp':>14}  {'server µs/comp':>14}")
    for i, n in enumerate(counts):
        phases = [r[i] for r in got]
        rate = statistics.median(p.compensations_per_second for p in phases)
        ratio = statistics.median(r[i].compensations_per_second / r[0].compensations_per_second for r in got)
        client = statistics.median(p.client_us for p in phases)
        server = statistics.median(p.server_us for p in phases)
        print(f"{n:>9}  {rate:>7,.0f}  {ratio:>5.2f}x  {client:>14.0f}  {server:>14.0f}")


if __name__ == "__main__":
    main()
