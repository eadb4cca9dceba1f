"""What an in-process unwind costs in work done, counted rather than timed (issue 26).

On a shared 2-core machine a timing moves with whatever else runs; these counts do not. Seeds
``--runs`` five-step runs of no-op calls into a fresh journal, unwinds ten of them to warm the
statement caches, then unwinds the rest with ``compensate_run`` in one of two ways:

``--mode cprofile`` (the default): under cProfile, printing the Python function calls per unwind
(deterministic: the same code makes the same calls) and the functions with the most calls and the
most time of their own.

``--mode plain``: with no profiler, for a count of machine instructions from outside::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python -m bench.cpu_counts --mode plain --runs 200
    # minus the same with --unwind 0 (seeds and warms the same, unwinds nothing): the unwinds' own

``--mode time``: no profiler, the unwinds' wall time and this process's CPU time
(``time.process_time``) per unwind: a timing, so run it alternately against the other tree.

Run ids are fixed and ``PYTHONHASHSEED=0`` is advised, so two runs of one commit count alike.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time

from bench.common import Backend
from bench.seed import noop_tools, seed
from saga_worker import compensate_run

STEPS = 5
WARM = 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_counts", description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "memory"), default="sqlite")
    parser.add_argument("--runs", type=int, default=200, help="five-step runs seeded (and unwound)")
    parser.add_argument("--unwind", type=int, default=None, help="how many to unwind (default: --runs)")
    parser.add_argument("--mode", choices=("cprofile", "plain", "time"), default="cprofile")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    unwind = args.runs if args.unwind is None else args.unwind
    tools = noop_tools()
    with Backend(args.backend) as backend:
        ids = [f"cnt-{i:06d}" for i in range(args.runs + WARM)]
        if backend.engine is not None:
            seed(backend.engine, ids, STEPS)
        else:
            from bench.seed import record_run

            for run_id in ids:
                record_run(backend.journal, run_id, STEPS, tools)
        for run_id in ids[:WARM]:
            compensate_run(run_id, journal=backend.journal, tools=tools)
        todo = ids[WARM : WARM + unwind]
        if args.mode in ("plain", "time"):
            cpu, wall = time.process_time(), time.perf_counter()
            for run_id in todo:
                assert compensate_run(run_id, journal=backend.journal, tools=tools).complete
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            if args.mode == "time":
                n = max(len(todo), 1)
                print(
                    f"{args.backend}: wall {wall / n * 1e6:.0f} µs/unwind, cpu {cpu / n * 1e6:.0f} µs/unwind "
                    f"({len(todo)} unwinds of {STEPS} steps)"
                )
            return 0
        profiler = cProfile.Profile()
        profiler.enable()
        for run_id in todo:
            compensate_run(run_id, journal=backend.journal, tools=tools)
        profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stdout)
    n = max(len(todo), 1)
    print(
        f"{args.backend}: {len(todo)} unwinds of {STEPS} steps: {stats.total_calls} function calls "
        f"({stats.total_calls / n:.1f} per unwind; {stats.prim_calls / n:.1f} primitive), "
        f"{stats.total_tt / n * 1e6:.0f} µs per unwind under the profiler"
    )
    stats.sort_stats("ncalls").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
