"""Concurrent in-process unwinds on one journal: N at once ÷ one at a time, same run.

Seeds five-step runs of no-op hooks into a fresh journal (SQLite, or a PostgreSQL database of its
own), then unwinds batches of them with
``compensate_run``: one at a time; N threads of one process (one journal object, a connection per
thread); N processes (each opens the journal itself, as separate workers would). Rounds alternate
(one at a time, then each concurrent kind), and each kind's rate is divided by the one-at-a-time
rate of the same round: load from elsewhere hits both alike. What bounds it: SQLite has one writer
at a time (every commit takes the file's write lock); PostgreSQL's server shares the machine's
cores (2 here) with the unwinding processes.

    python -m bench.concurrency --runs 120 --rounds 3
    python -m bench.concurrency --backends postgres
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.common import Backend, Row, Table
from bench.config import Config
from bench.seed import noop_tools, seed
from saga_worker import compensate_run, open_journal

STEPS = 5


def _unwind_all(
    url: str, run_ids: Sequence[str], ready: Any = None, go: Any = None, warm: str | None = None
) -> float:
    """Unwind ``run_ids`` one after the other; the seconds that took. ``warm``: a run of its own,
    unwound first, before ``ready`` and the clock (the process's and connection's first-use costs)."""
    journal = open_journal(url)
    tools = noop_tools()
    journal.get_run("warm")  # the connection open before the clock starts
    if warm is not None:
        assert compensate_run(warm, journal=journal, tools=tools).complete
    if ready is not None:
        ready.release()
        go.wait()
    began = time.perf_counter()
    try:
        for run_id in run_ids:
            report = compensate_run(run_id, journal=journal, tools=tools)
            assert report.complete, report
        return time.perf_counter() - began
    finally:
        journal.close()


def _in_threads(url: str, shares: list[list[str]], warms: Sequence[str] | None = None) -> float:
    """Seconds for the threads to unwind their shares; with ``warms``, each thread first unwinds its
    warm-up run, and the clock starts once all have."""
    journal = open_journal(url)
    tools = noop_tools()
    started = threading.Barrier(len(shares) + 1)

    def work(i: int, share: list[str]) -> None:
        if warms is not None:
            assert compensate_run(warms[i], journal=journal, tools=tools).complete
            started.wait()
        for run_id in share:
            assert compensate_run(run_id, journal=journal, tools=tools).complete

    threads = [threading.Thread(target=work, args=(i, share)) for i, share in enumerate(shares)]
    began = time.perf_counter()
    try:
        for t in threads:
            t.start()
        if warms is not None:
            started.wait()
            began = time.perf_counter()
        for t in threads:
            t.join()
        return time.perf_counter() - began
    finally:
        journal.close()


def _in_processes(url: str, shares: list[list[str]], warms: Sequence[str] | None = None) -> float:
    """Seconds from the moment every process is up (its journal open; with ``warms``, its warm-up
    run unwound) until the last one is done: starting a process is not an unwind's cost."""
    ctx = multiprocessing.get_context("fork")
    ready, go = ctx.Semaphore(0), ctx.Event()
    procs = [
        ctx.Process(target=_unwind_all, args=(url, share, ready, go, None if warms is None else warms[i]))
        for i, share in enumerate(shares)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    began = time.perf_counter()
    go.set()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"an unwinding process ended with {p.exitcode}")
    return time.perf_counter() - began


def _split(ids: list[str], n: int) -> list[list[str]]:
    return [ids[i::n] for i in range(n)]


def measure(
    runs: int, rounds: int, kinds: Sequence[tuple[str, int]], *, warm: bool = False, backend: str = "sqlite"
) -> dict[str, list[float]]:
    """Per round, each kind's compensated steps/s ÷ one at a time's (same round).

    ``warm``: every unwinder (the one at a time, each thread, each process) first unwinds a run of
    its own before the clock starts, so that a connection's and a process's first-use costs (SQLite
    preparing each statement, the first unwind's lazy imports) are not counted: a worker pays them
    once in its life. Without it (the default, as the issue's figures were measured), one at a time
    is timed from its journal's open, and each thread and process from its first unwind."""
    ratios: dict[str, list[float]] = {f"{kind} N={n}": [] for kind, n in kinds}
    with Backend(backend) as journal_of_its_own:
        url = journal_of_its_own.url
        batches = (1 + len(kinds)) * rounds
        ids = [[f"conc-{b}-{i:05d}" for i in range(runs)] for b in range(batches)]
        warm_ids = [[f"warm-{b}-{i:03d}" for i in range(max(n for _, n in kinds))] for b in range(batches)]
        assert journal_of_its_own.engine is not None
        seed(
            journal_of_its_own.engine,
            [r for batch in ids for r in batch] + ([r for w in warm_ids for r in w] if warm else []),
            STEPS,
        )
        journal_of_its_own.journal.close()  # its connections not shared with the forked processes
        it = iter(zip(ids, warm_ids, strict=True))
        for _ in range(rounds):
            alone, alone_warm = next(it)
            if warm:
                one = _unwind_all(url, alone, warm=alone_warm[0])
            else:
                one = _timed(lambda b=alone: _unwind_all(url, b))
            for kind, n in kinds:
                batch, batch_warm = next(it)
                warms = batch_warm[:n] if warm else None
                if kind == "threads":
                    if warm:
                        took = _in_threads(url, _split(batch, n), warms)
                    else:
                        took = _timed(lambda b=batch, n=n: _in_threads(url, _split(b, n)))
                else:
                    took = _in_processes(url, _split(batch, n), warms)
                ratios[f"{kind} N={n}"].append(one / took)
    return ratios


def _timed(work: Callable[[], object]) -> float:
    began = time.perf_counter()
    work()
    return time.perf_counter() - began


KINDS = (("threads", 8), ("processes", 8), ("processes", 32))
# Issue 45's targets: SQLite's one writer at a time must not make N slower than one; PostgreSQL's
# eight processes must outrun one by half.
TARGETS = {
    "sqlite": {"threads N=8": 1.2, "processes N=8": 0.8, "processes N=32": 0.6},
    "postgres": {"processes N=8": 1.5},
}


def rows(cfg: Config) -> list[Row]:
    runs = 64 if cfg.quick else 256
    out = []
    for backend in cfg.backends(TARGETS):
        out.extend(_backend_rows(backend, runs, cfg.rounds))
    return out


def _backend_rows(backend: str, runs: int, rounds: int) -> list[Row]:
    # PostgreSQL warm: a process's first unwind opens its connections and has the server prepare
    # each statement (a worker's once in its life); at 8 runs a process that would be most of it.
    warm = backend == "postgres"
    out = []
    for name, values in measure(runs, rounds, KINDS, backend=backend, warm=warm).items():
        target = TARGETS[backend].get(name)
        median = statistics.median(values)
        out.append(
            Row(
                f"{backend}: {name} concurrent unwinds ÷ one at a time",
                median,
                "x",
                target="" if target is None else f">= {target}x",
                ok=None if target is None else median >= target,
                note=f"{runs} five-step runs a round{', warm' if warm else ''}; "
                f"rounds {', '.join(f'{v:.2f}' for v in values)}",
            )
        )
    return out


def run(cfg: Config) -> list[Table]:
    table = Table("Concurrent in-process unwinds on one journal (same-run ratios)")
    for row in rows(cfg):
        table.add(row)
    return [table]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.concurrency", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--warm",
        action="store_true",
        help="each unwinder unwinds a run of its own before the clock starts (first-use costs not counted)",
    )
    parser.add_argument("--backends", default="sqlite", help="comma-separated: sqlite, postgres")
    args = parser.parse_args()
    for backend in args.backends.split(","):
        for name, values in measure(args.runs, args.rounds, KINDS, warm=args.warm, backend=backend).items():
            rounds = ", ".join(f"{v:.2f}" for v in values)
            print(f"{backend} {name}: median {statistics.median(values):.2f}x (rounds {rounds})")


if __name__ == "__main__":
    main()
