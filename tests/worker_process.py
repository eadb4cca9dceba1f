"""A real Celery worker process for the tests: main process, prefork pool and optional embedded beat,
in a process group of its own (so one signal reaches all of it), its output appended to a log file."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class WorkerProcess:
    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        log: Path,
        *,
        concurrency: int,
        beat: bool,
        events: bool = False,
        name: str = "t",
        python: str = sys.executable,
        cwd: Path = REPO,
        prefix: Sequence[str] = (),
    ) -> None:
        """``command`` is what follows ``python -m`` up to the worker's options (for example
        ``["celery", "-A", "saga_worker.celery:app", "worker"]``); ``prefix`` what the whole runs under
        (``ip netns exec NS`` puts it on a host of tests/fleet)."""
        self.log = log
        argv = [
            *prefix,
            python,
            "-m",
            *command,
            "--loglevel",
            "info",
            "--pool",
            "prefork",
            "--concurrency",
            str(concurrency),
            "--hostname",
            f"{name}{uuid.uuid4().hex[:8]}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        if beat:
            argv.append("--beat")
        if events:
            argv.append("--events")
        self._out = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=dict(env), stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def ready(self) -> bool:
        """Has the worker said it is ready? Raises AssertionError, with its log, if it has exited."""
        if self.proc.poll() is not None:
            raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.tail()}")
        return b" ready." in self.log.read_bytes()

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL the whole worker: main process, pool children, embedded beat."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.kill()
        self._out.close()
