"""Commits, fsyncs and WAL frames (SQLite) and round trips (PostgreSQL) per compensated step, counted.

Counted, not timed, so the same on every machine: an in-process ``compensate_run`` of five-step
no-op runs, in a child process (``bench/commits_child.py``) under ``strace -f -xx``, between the
marks it writes around the unwinds.

SQLite writes each WAL frame as two ``pwrite64`` calls, its 24-byte header and then the page; a
header whose second word (the database's size after the commit) is not zero ends a commit. So the
24-byte writes to the ``-wal`` file are the frames, those with a size the commits, and the
``fsync``/``fdatasync`` calls the syncs (the durable commits' and the checkpoints').

``--breakdown`` (SQLite): the frames of each counted unwind, commit by commit, by the table or index
each frame's page belongs to (the page number is the frame header's first word; the child maps pages
to their b-trees with ``dbstat`` once the unwinds are done).

PostgreSQL: a ``sendto`` on the client's socket to the server after a ``recvfrom`` on it (or the
first) starts a round trip: libpq sends a pipeline's statements one call each, then reads the answers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import Row, Table
from bench.config import Config
from bench.strace import MARKER_ENV, PAGES_ENV, strace_binary

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
    # --breakdown: per counted unwind, its commits, each the owners (b-tree names) of its frames' pages
    unwinds: list[list[list[str]]] = field(default_factory=list)

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


def count(
    backend: str, runs: int, *, breakdown: bool = False, prior: int = 0, drop_indexes: str = ""
) -> Counts:
    """Trace ``runs`` in-process unwinds of five-step runs on a fresh journal of ``backend`` (holding
    ``prior`` runs unwound before them); ``breakdown``: also which pages each unwind's commits wrote
    (SQLite); ``drop_indexes``: comma-separated indexes dropped before the counted unwinds (a what-if:
    the journal without them is not one the library makes)."""
    binary = strace_binary()
    if binary is None:
        raise RuntimeError("strace is not installed (apt-get install -y strace)")
    with tempfile.TemporaryDirectory(prefix="saga-bench-commits-") as tmp:
        log, marker, pages = Path(tmp) / "strace.log", Path(tmp) / "marker", Path(tmp) / "pages.json"
        argv = [
            sys.executable,
            "-m",
            "bench.commits_child",
            backend,
            "--runs",
            str(runs),
            "--prior",
            str(prior),
            "--drop-indexes",
            drop_indexes,
        ]
        traced = "write,pwrite64,fsync,fdatasync,sendto,recvfrom"
        done = subprocess.run(
            [binary, "-f", "-yy", "-xx", "-qq", "-s", "32", "-e", f"trace={traced}", "-o", str(log), *argv],
            env={**os.environ, MARKER_ENV: str(marker), **({PAGES_ENV: str(pages)} if breakdown else {})},
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"bench.commits_child failed under strace: {done.stderr[-2000:]}")
        lines = _between_marks(log.read_text(errors="replace"), str(marker))
        owners: dict[str, str] = json.loads(pages.read_text()) if breakdown and pages.exists() else {}
    commits = frames = syncs = trips = 0
    unwinds: list[list[list[str]]] = []
    written: list[str] = []  # the owners of the open commit's frames
    answered: dict[str, bool] = {}  # per socket: whether the last call on it read the server's answer
    for line in lines:
        if "fsync(" in line or "fdatasync(" in line:
            syncs += 1
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        path = _text(m["path"])
        if breakdown and path == str(marker) and _text(m["data"]) == "run":
            unwinds.append([])
        elif m["name"] == "pwrite64" and path.endswith("-wal"):
            raw = _header_bytes(m["data"])
            if len(raw) == 24:
                frames += 1
                commits += raw[4:8] != b"\0\0\0\0"
                if breakdown and unwinds:
                    page = str(int.from_bytes(raw[0:4], "big"))
                    written.append(owners.get(page, f"page {page} (freed since)"))
                    if raw[4:8] != b"\0\0\0\0":
                        unwinds[-1].append(written)
                        written = []
        elif m["name"] == "sendto" and ":5432]" in path:
            trips += answered.get(path, True)  # a send after an answer (or the first) starts a round trip
            answered[path] = False
        elif m["name"] == "recvfrom" and ":5432]" in path:
            answered[path] = True
    return Counts(runs * STEPS, commits, frames, syncs, trips, unwinds)


def breakdown_lines(c: Counts) -> list[str]:
    """The frames of the counted unwinds, commit by commit (the unwinds of the most common number of
    commits; mean frames per commit, and per b-tree the mean frames it wrote in that commit)."""
    if not any(c.unwinds):  # none counted, or PostgreSQL (no WAL frames of its own to read)
        return []
    shapes = Counter(len(u) for u in c.unwinds)
    commits, alike = shapes.most_common(1)[0]
    chosen = [u for u in c.unwinds if len(u) == commits]
    total = sum(len(f) for u in chosen for f in u) / len(chosen)
    lines = [
        f"{alike} of {len(c.unwinds)} unwinds commit {commits} times (commits per unwind: "
        + ", ".join(f"{n} x{k}" for n, k in sorted(shapes.items()))
        + f"); theirs, {total:.2f} frames per unwind:"
    ]
    for i in range(commits):
        per = Counter(owner for u in chosen for owner in u[i])
        frames = sum(per.values()) / len(chosen)
        parts = ", ".join(f"{name} {n / len(chosen):.2f}" for name, n in per.most_common())
        lines.append(f"  commit {i + 1}: {frames:.2f} frames: {parts}")
    return lines


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
    parser.add_argument(
        "--prior", type=int, default=0, help="ended runs in the journal first (one in ten unwound)"
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="SQLite: each commit's frames by the table or index they wrote",
    )
    parser.add_argument(
        "--drop-indexes",
        default="",
        metavar="A,B",
        help="SQLite, a what-if: these indexes dropped before the counted unwinds (what their frames cost)",
    )
    args = parser.parse_args()
    for backend in args.backends.split(","):
        c = count(
            backend, args.runs, breakdown=args.breakdown, prior=args.prior, drop_indexes=args.drop_indexes
        )
        print(
            f"{backend}: {c.steps} steps: commits {c.per_step(c.commits):.2f}, fsyncs {c.per_step(c.syncs):.2f}, "
            f"WAL frames {c.per_step(c.frames):.2f}, PG round trips {c.per_step(c.round_trips):.2f} per step"
        )
        for line in breakdown_lines(c):
            print(line)


if __name__ == "__main__":
    main()
