"""Celery workers for the bench: subprocesses in their own process group, killed at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class Worker:
    """``celery -A app worker`` on a queue of its own, with ``concurrency`` prefork processes."""

    def __init__(
        self,
        app: str,
        queues: list[str],
        *,
        concurrency: int = 2,
        env: Mapping[str, str] | None = None,
        include: str | None = None,
        log: str = "WARNING",
    ) -> None:
        self.name = f"bench-{uuid.uuid4().hex[:6]}@%h"
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            app,
            "worker",
            "-P",
            "prefork",
            "-c",
            str(concurrency),
            "-Q",
            ",".join(queues),
            "-n",
            self.name,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            log,
        ]
        if include:
            cmd += ["-I", include]
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self.log_path = Path(f"/tmp/saga-bench-worker-{uuid.uuid4().hex[:6]}.log")
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=full_env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, probe: Callable[[], object], timeout: float = 60.0) -> None:
        """Until ``probe`` (a task round trip through this worker) succeeds."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}: {self.tail()}")
            try:
                probe()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"worker not ready after {timeout:.0f} s: {self.tail()}") from None

    def child_pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def tail(self, lines: int = 30) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0
