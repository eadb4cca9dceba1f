"""Commits, fsyncs and WAL frames (SQLite) and round trips (PostgreSQL) per compensated step, counted.

Counted, not timed, so the same on every machine: an in-process ``compensate_run`` of five-step
no-op runs, in a child process (``bench/commits_child.py``) under ``strace -f -xx``, between the
marks it writes around the unwinds.

SQLite writes each WAL frame as two ``pwrite64`` calls, its 24-byte header and then the page; a
header whose second word (the database's size after the commit) is not zero ends a commit. So the
24-byte writes to the ``-wal`` file are the frames, those with a size the commits, and the
``fsync``/``fdatasync`` calls the syncs (the durable commits' and the checkpoints').

PostgreSQL: a ``sendto`` on the client's socket to the server after a ``recvfrom`` on it (or the
first) starts a round trip: libpq sends a pipeline's statements one call each, then reads the answers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.common import Row, Table
from bench.config import Config
from bench.strace import MARKER_ENV, strace_binary

_LINE = re.compile(r"^\d+\s+(?P<name>\w+)\((?P<fd>\d+)<(?P<path>.*?)>, \"(?P<data>[^\"]*)\"(?P<rest>.*)$")
STEPS = 5


@dataclass(frozen=True)
class Counts:
    """What the unwinds between the marks did, and how many steps they compensated."""

    steps: int
    commits: int = 0
    frames: int = 0
    syncs: int = 0
    round_trips: int = 0

    def per_step(self, value: int) -> float:
        return value / self.steps


def _between_marks(log: str, marker: str) -> list[str]:
    lines = log.splitlines()
    marks = [i for i, line in enumerate(lines) if (m := _LINE.match(line)) and _text(m["path"]) == marker]
    if len(marks) < 2:
        raise RuntimeError("the traced child wrote no phase marks")
    return lines[marks[0] : marks[-1]]


def _header_bytes(data: str) -> bytes:
    """strace -xx's text of a write (every byte as \\xNN) back to bytes."""
    return bytes(int(h, 16) for h in data.split("\\x")[1:])


def _text(data: str) -> str:
    """strace -xx's text of a path back to the path."""
    return _header_bytes(data).decode(errors="replace") if data.startswith("\\x") else data


def count(backend: str, runs: int) -> Counts:
    """Trace ``runs`` in-process unwinds of five-step runs on a fresh journal of ``backend``."""
    binary = strace_binary()
    if binary is None:
        raise RuntimeError("strace is not installed (apt-get install -y strace)")
    with tempfile.TemporaryDirectory(prefix="saga-bench-commits-") as tmp:
        log, marker = Path(tmp) / "strace.log", Path(tmp) / "marker"
        argv = [sys.executable, "-m", "bench.commits_child", backend, "--runs", str(runs)]
        traced = "write,pwrite64,fsync,fdatasync,sendto,recvfrom"
        done = subprocess.run(
            [binary, "-f", "-yy", "-xx", "-qq", "-s", "32", "-e", f"trace={traced}", "-o", str(log), *argv],
            env={**os.environ, MARKER_ENV: str(marker)},
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"bench.commits_child failed under strace: {done.stderr[-2000:]}")
        lines = _between_marks(log.read_text(errors="replace"), str(marker))
    commits = frames = syncs = trips = 0
    answered: dict[str, bool] = {}  # per socket: whether the last call on it read the server's answer
    for line in lines:
        if "fsync(" in line or "fdatasync(" in line:
            syncs += 1
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        path = _text(m["path"])
        if m["name"] == "pwrite64" and path.endswith("-wal"):
            raw = _header_bytes(m["data"])
            if len(raw) == 24:
                frames += 1
                commits += raw[4:8] != b"\0\0\0\0"
        elif m["name"] == "sendto" and ":5432]" in path:
            trips += answered.get(path, True)  # a send after an answer (or the first) starts a round trip
            answered[path] = False
        elif m["name"] == "recvfrom" and ":5432]" in path:
            answered[path] = True
    return Counts(runs * STEPS, commits, frames, syncs, trips)


TARGETS = {"commits": 1.2, "fsyncs": 0.25, "WAL frames": 3.0, "PostgreSQL round trips": 1.2}


def run(cfg: Config) -> list[Table]:
    table = Table(
        "The contract's writes per compensation, counted (strace; the same on every machine)",
        caption="in-process compensate_run of five-step no-op runs, per compensated step; targets: issue 45",
    )
    if strace_binary() is None:
        table.add(
            Row("commit counts", None, "", note="skipped: strace is not installed (apt-get install strace)")
        )
        return [table]
    runs = 40 if cfg.quick else 100
    for backend in cfg.backends(("sqlite", "postgres")):
        c = count(backend, runs)
        measures = (
            [("commits", c.commits), ("fsyncs", c.syncs), ("WAL frames", c.frames)]
            if backend == "sqlite"
            else [("PostgreSQL round trips", c.round_trips)]
        )
        for name, value in measures:
            per = c.per_step(value)
            table.add(
                Row(
                    f"{backend}: {name} per compensation",
                    per,
                    "",
                    target=f"<= {TARGETS[name]:g}",
                    ok=per <= TARGETS[name],
                    note=f"{value} for {c.steps} steps ({runs} unwinds)",
                )
            )
    return [table]


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.commits", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args()
    for backend in args.backends.split(","):
        c = count(backend, args.runs)
        print(
            f"{backend}: {c.steps} steps: commits {c.per_step(c.commits):.2f}, fsyncs {c.per_step(c.syncs):.2f}, "
            f"WAL frames {c.per_step(c.frames):.2f}, PG round trips {c.per_step(c.round_trips):.2f} per step"
        )


if __name__ == "__main__":
    main()
