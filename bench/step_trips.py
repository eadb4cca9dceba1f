"""Round trips of a distributed unwind's tasks, counted (PostgreSQL and the Redis step lock).

Counted, not timed, so the same on every machine: the journal and lock calls that
``saga.compensate_run``'s tasks make (``executor.start_unwind``, then ``executor.run_step`` per step
with the Redis step lock, then ``executor.finalize_unwind``, as ``celery/tasks.py`` calls them), in
one traced child process (``python -m bench.step_trips --child``) under ``strace -f``, for five-step
no-op runs, between marks written around each task's part. Celery's own messages are not in the
count (no broker here): what is counted is what a step task adds to a no-op task.

A ``sendto`` on a socket after a ``recvfrom`` on it (or the first) starts a round trip: a pipeline's
statements are one round trip (``bench/commits.py`` counts the same way).

    python -m bench.step_trips [--runs 40]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from bench.strace import MARKER_ENV, mark, strace_binary

STEPS = 5
WARM = 5
_LINE = re.compile(r"^\d+\s+(?P<name>\w+)\((?P<fd>\d+)<(?P<path>.*?)>, (?P<rest>.*)$")
_TEXT = re.compile(r'"((?:[^"\\]|\\.)*)"')


def child(runs: int) -> None:
    from bench.common import REDIS_URL, Backend, new_id
    from bench.seed import noop_tools, seed
    from saga_worker import executor
    from saga_worker.locks.redis import RedisStepLock

    tools = noop_tools()
    lock = RedisStepLock.from_url(REDIS_URL)
    with Backend("postgres") as backend:
        assert backend.engine is not None
        ids = [new_id("trips") for _ in range(runs + WARM)]
        seed(backend.engine, ids, STEPS)
        for i, run_id in enumerate(ids):
            counted = i >= WARM
            unwind_id = new_id("unwind")
            mark("coordinator" if counted else "warm")
            nxt = executor.start_unwind(backend.journal, run_id, unwind_id, dry_run=False, claim_ttl=30.0)
            while isinstance(nxt, executor.Step):
                mark("step" if counted else "warm")
                got = executor.run_step(
                    backend.journal, tools, run_id, unwind_id, nxt.suffix, claim_ttl=30.0, lock=lock
                )
                assert got is not None
                nxt = got
            mark("report" if counted else "warm")
            # As the last step task does (celery/tasks.py): with the unwind it read, and the report
            # whose end it wrote with its outcome, if it did.
            assert isinstance(nxt, executor.Finalize), nxt
            report = executor.finalize_unwind(
                backend.journal, run_id, unwind_id, info=nxt.info, ended=nxt.report
            )
            assert report.complete and len(report.entries) == STEPS, report
            mark("warm")
        mark("end")


def count(runs: int) -> dict[str, Counter[str]]:
    """Round trips by phase (coordinator, step, report) and by server (postgres, redis)."""
    binary = strace_binary()
    if binary is None:
        raise RuntimeError("strace is not installed (apt-get install -y strace)")
    with tempfile.TemporaryDirectory(prefix="saga-bench-trips-") as tmp:
        log, marker = Path(tmp) / "strace.log", Path(tmp) / "marker"
        argv = [sys.executable, "-m", "bench.step_trips", "--child", "--runs", str(runs)]
        done = subprocess.run(
            [
                binary,
                "-f",
                "-yy",
                "-qq",
                "-s",
                "64",
                "-e",
                "trace=write,sendto,recvfrom",
                "-o",
                str(log),
                *argv,
            ],
            env={**os.environ, MARKER_ENV: str(marker)},
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"bench.step_trips --child failed under strace: {done.stderr[-2000:]}")
        text = log.read_text(errors="replace")
    phase = "warm"
    trips: dict[str, Counter[str]] = {}
    answered: dict[str, bool] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        path = m["path"]
        if path == str(marker) and m["name"] == "write":
            found = _TEXT.search(m["rest"])
            phase = found.group(1) if found else phase
            continue
        server = "postgres" if ":5432]" in path else "redis" if ":6379]" in path else None
        if server is None:
            continue
        if m["name"] == "sendto":
            if answered.get(path, True):
                trips.setdefault(phase, Counter())[server] += 1
            answered[path] = False
        elif m["name"] == "recvfrom":
            answered[path] = True
    return trips


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.step_trips", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.runs)
        return
    trips = count(args.runs)
    per = {"coordinator": args.runs, "step": args.runs * STEPS, "report": args.runs}
    for phase, n in per.items():
        got = trips.get(phase, Counter())
        print(
            f"{phase}: PostgreSQL {got['postgres'] / n:.2f}, Redis {got['redis'] / n:.2f} round trips "
            f"per {'step' if phase == 'step' else 'unwind'}"
        )


if __name__ == "__main__":
    main()
