"""User-space instructions per compensation of an in-process unwind, counted by valgrind: a CPU figure
that does not move with the machine's load.

``python -m bench.instructions`` runs two processes under ``valgrind --tool=cachegrind`` (instruction
counts only, no cache simulation), each seeding a fresh SQLite journal with the same runs (20 plus
``MANY``), unwinding 20 five-step runs to warm it, then ``FEW`` or ``MANY`` more (no-op hooks, as
the ``peers`` group's). The difference of their counts, divided by the steps between them, is the
instructions one compensation costs: the Python, SQLite's own C; the startup and the seeding cancel
out (both processes seed alike). The kernel's work (fsync, the write
gate's ``flock``) is not counted. Runs of the same code agree within about 3%, where the
``peers`` group's CPU per compensation moves 10–20% between runs on a loaded machine.

SQLite only: on PostgreSQL the count includes psycopg's wait for the server's answer, which depends
on timing (valgrind slows the client ~50x), and two runs of the same code differed by 60%.
Needs ``valgrind`` (``apt-get install valgrind``); about a minute.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

STEPS = 5
WARM = 20


def _child(runs: int, seeded: int) -> None:
    from bench.common import Backend, new_id
    from bench.seed import noop_tools, seed
    from saga_worker import compensate_run

    with Backend("sqlite") as backend:
        assert backend.engine is not None
        ids = [new_id("ir") for _ in range(WARM + max(runs, seeded))]
        seed(backend.engine, ids, STEPS)
        tools = noop_tools()
        for run_id in ids[: WARM + runs]:
            assert compensate_run(run_id, journal=backend.journal, tools=tools).complete


def _counted(runs: int, seeded: int) -> int:
    """The instructions of a process that seeds ``WARM + seeded`` runs and unwinds ``WARM + runs`` of
    them (valgrind's ``I refs``): seeded alike, two such processes differ by their unwinds alone."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONMALLOC": "malloc"}
    command = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        "-m",
        "bench.instructions",
        "--child",
        str(runs),
        "--seeded",
        str(seeded),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise RuntimeError(f"valgrind printed no instruction count:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--few", type=int, default=10, help="runs unwound by the first process")
    parser.add_argument("--many", type=int, default=30, help="runs unwound by the second process")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seeded", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child(args.child, args.seeded)
        return
    if shutil.which("valgrind") is None:
        sys.exit("bench.instructions needs valgrind (apt-get install valgrind)")
    few, many = _counted(args.few, args.many), _counted(args.many, args.many)
    per = (many - few) / ((args.many - args.few) * STEPS)
    print(
        f"sqlite compensate_run, {STEPS}-step runs, no-op hooks: {per / 1000:,.0f}k user-space "
        f"instructions per compensation ({args.many} runs' process minus {args.few} runs')"
    )


if __name__ == "__main__":
    main()
