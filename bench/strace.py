"""Run a process under ``strace`` and read back the syscalls that decide durability, in order.

Used by the bench's fsync counts (``bench/fsyncs.py``) and by the test that checks the order of
the tombstone's sync and the first compensate hook (tests/journal/test_sqlite_durability.py). A count of
``fsync`` + ``fdatasync`` calls is machine-independent, unlike their cost. The traced process marks
where it is by writing short texts to a marker file (``mark``), so the log orders its phases, hook
calls and the journal's writes and syncs on one timeline.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SYNCS = ("fsync", "fdatasync")
TRACED = ("write", "pwrite64", *SYNCS)
_LINE = re.compile(r"^(?P<pid>\d+)\s+(?P<name>\w+)\((?P<fd>\d+)<(?P<path>[^>]*)>(?P<rest>.*)$")
_TEXT = re.compile(r'"((?:[^"\\]|\\.)*)"')
MARKER_ENV = "SAGA_STRACE_MARKER"
# bench.commits --breakdown: where the traced child writes which b-tree each database page belongs to
PAGES_ENV = "SAGA_BENCH_PAGES"


@dataclass(frozen=True)
class Call:
    """One traced syscall on a file descriptor: its name, the file's path, and for a write to the
    marker file the text written."""

    name: str
    path: str
    text: str = ""

    @property
    def is_sync(self) -> bool:
        return self.name in SYNCS

    def on_journal(self, journal_path: str) -> bool:
        """The journal's database file or its write-ahead log."""
        return self.path in (journal_path, journal_path + "-wal")


def strace_binary() -> str | None:
    return shutil.which("strace")


def mark(text: str) -> None:
    """Write ``text`` to the marker file named by $SAGA_STRACE_MARKER (nothing if unset)."""
    path = os.environ.get(MARKER_ENV)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def trace(argv: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 300.0) -> list[Call]:
    """Run ``argv`` under ``strace -f`` (threads and children too); its file syscalls in order.

    Raises RuntimeError if strace is missing or the process fails (with its stderr)."""
    binary = strace_binary()
    if binary is None:
        raise RuntimeError("strace is not installed (apt-get install -y strace)")
    with tempfile.TemporaryDirectory(prefix="saga-strace-") as tmp:
        log = Path(tmp) / "strace.log"
        marker = Path(tmp) / "marker"
        full_env = {**os.environ, **(env or {}), MARKER_ENV: str(marker)}
        done = subprocess.run(
            [binary, "-f", "-y", "-qq", "-s", "64", "-e", f"trace={','.join(TRACED)}", "-o", str(log), *argv],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed under strace ({done.returncode}): {done.stderr[-2000:]}"
            )
        return parse(log.read_text(errors="replace"), str(marker))


def parse(log: str, marker_path: str) -> list[Call]:
    calls = []
    for line in log.splitlines():
        m = _LINE.match(line)
        if m is None:  # a "<... resumed>" line: its call was logged when it began
            continue
        name, path = m["name"], m["path"]
        text = ""
        if path == marker_path:
            found = _TEXT.search(m["rest"])
            text = found.group(1) if found else ""
        calls.append(Call(name, path, text))
    return calls


def marks(calls: Sequence[Call], marker_path_suffix: str = "marker") -> list[tuple[int, str]]:
    """Positions and texts of the marker writes."""
    return [(i, c.text) for i, c in enumerate(calls) if c.text and c.path.endswith(marker_path_suffix)]
