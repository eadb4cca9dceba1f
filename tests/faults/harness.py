"""The fault suite's harness: runs to unwind, worker processes in their own process groups, and
servers of the suite's own (a Redis and a PostgreSQL on spare loopback ports) it may restart at will.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from saga_worker import CompensatedRunError, Journal, ToolCall, run_durable, scripted
from saga_worker.errors import SagaError
from tests.worker_process import WorkerProcess

REPO = Path(__file__).resolve().parents[2]


def start_run(
    journal: Journal,
    run_id: str,
    steps: int,
    *,
    last_sleep: float = 0.0,
    comp_sleep: float = 0.0,
    comp_hold: str = "",
    comp_fail: int = 0,
) -> str:
    """Run ``steps`` calls of ``pay`` (the last one slow if asked); the outcome as a word."""
    from .toolkit import TOOLS

    calls = [
        ToolCall(
            "pay",
            {
                "n": i,
                "comp_sleep": comp_sleep,
                **({"comp_hold": comp_hold} if comp_hold else {}),
                "comp_fail": comp_fail,
                "sleep": last_sleep if i == steps else 0,
            },
        )
        for i in range(1, steps + 1)
    ]
    try:
        return run_durable(run_id, journal=journal, tools=TOOLS, planner=scripted(*calls)).status
    except CompensatedRunError:
        return "condemned"
    except SagaError as exc:
        return f"error: {exc}"


def start_grouped_run(
    journal: Journal,
    run_id: str,
    group: int,
    *,
    exec_sleep: float = 0.0,
    fail: Sequence[int] = (),
    **comp: Any,
) -> str:
    """A ``saga()`` block of ``pay`` calls: call-1 alone, then ``group`` calls made side by side in one
    ``parallel()`` block (each executing for ``exec_sleep`` s), then one more alone; the outcome as a
    word (``condemned`` when the tombstone stopped it). ``comp``: the hooks' ``comp_*`` inputs; the
    hooks of the calls numbered in ``fail`` refuse their first compensation."""
    from concurrent.futures import ThreadPoolExecutor

    from saga_worker import saga

    from .toolkit import TOOLS

    def pay(run: Any, n: int, sleep: float = 0.0) -> None:
        run.call("pay", {"n": n, "sleep": sleep, **comp, **({"comp_fail": 1} if n in fail else {})})

    try:
        with saga(run_id, journal=journal, tools=TOOLS) as run:
            pay(run, 1)
            with run.parallel(), ThreadPoolExecutor(max_workers=group) as pool:
                for done in [pool.submit(pay, run, n, exec_sleep) for n in range(2, group + 2)]:
                    done.result()
            pay(run, group + 2)
        return "finished"
    except CompensatedRunError:
        return "condemned"
    except SagaError as exc:
        return f"error: {exc}"


def hold_file(run_id: str) -> Path:
    """Where a ``comp_hold`` hook of ``run_id`` looks for its release (absent: it stays in the hook)."""
    path = Path(tempfile.gettempdir()) / f"saga-fault-hold-{run_id}"
    path.unlink(missing_ok=True)
    return path


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    """A child process in its own process group (so a kill reaches its whole tree)."""

    def __init__(
        self, args: list[str], env: Mapping[str, str], *, cwd: Path = REPO, log: Path | None = None
    ) -> None:
        self.args = args
        self.log = log
        out = open(log, "ab") if log else subprocess.PIPE  # noqa: SIM115
        self.popen = subprocess.Popen(
            args,
            env=dict(env),
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT if log else subprocess.PIPE,
            start_new_session=True,
        )
        self.pid = self.popen.pid
        self.stderr = ""

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def wait(self, timeout: float = 60) -> int:
        code = self.popen.wait(timeout=timeout)
        self._close_pipes()
        return code

    def _close_pipes(self) -> None:
        for pipe in (self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                pipe.close()

    def output(self, timeout: float = 60) -> str:
        """Its stdout once it exits (stderr is kept in ``self.stderr``)."""
        out, err = self.popen.communicate(timeout=timeout)
        self.stderr = (err or b"").decode()
        return (out or b"").decode()

    def last_json(self, timeout: float = 60) -> Any:
        import json

        lines = self.output(timeout).strip().splitlines()
        assert lines, f"no output from {self.args}: {self.stderr[-2000:]}"
        return json.loads(lines[-1])

    def stopped(self) -> bool:
        try:
            return Path(f"/proc/{self.pid}/stat").read_text().split(")")[-1].split()[0] == "T"
        except OSError:
            return False

    def __enter__(self) -> Proc:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.popen.poll() is None:
            self.signal(signal.SIGCONT)
            self.kill()
        self._close_pipes()


def child(command: str, *run_ids: str, env: Mapping[str, str], extra: list[str] | None = None) -> Proc:
    return Proc([sys.executable, "-m", "tests.faults.child", command, *run_ids, *(extra or [])], env)


class OwnRedis:
    """A redis-server of the suite's own on a spare loopback port; restartable, with or without persistence."""

    def __init__(
        self,
        *,
        persistent: bool,
        port: int | None = None,
        host: str = "127.0.0.1",
        directory: Path | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        """``host``, ``directory`` and ``prefix`` (what its command runs under, such as ``ip netns exec
        NS``) place it on another host of the fleet (tests/fleet); there it answers other hosts, so it
        runs with ``--protected-mode no``."""
        self.host, self.prefix = host, list(prefix)
        self.port = port or free_port()
        self.dir = directory or Path(tempfile.mkdtemp(prefix="fault-redis-"))
        self.persistent = persistent
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self) -> None:
        persist = (
            ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]
        )
        self.proc = subprocess.Popen(
            [
                *self.prefix,
                "redis-server",
                "--bind",
                self.host,
                "--port",
                str(self.port),
                "--dir",
                str(self.dir),
                "--save",
                "",
                "--protected-mode",
                "yes" if self.host == "127.0.0.1" else "no",
                *persist,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for(self._up, 20, f"redis on {self.port}")

    def _up(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # SIGTERM: redis flushes its AOF when persistent
            self.proc.wait(timeout=30)
        self.proc = None

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()
        self.restarts += 1

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class OwnPostgres:
    """A throwaway PostgreSQL cluster (initdb + pg_ctl as the ``postgres`` user) on a spare loopback port.

    The shared server on 5432 is never restarted: other suites use it."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        directory: Path | None = None,
        prefix: Sequence[str] = (),
        clients: str = "",
    ) -> None:
        """``host``, ``port``, ``directory`` and ``prefix`` (what its commands run under, such as ``ip
        netns exec NS``) place it on another host of the fleet (tests/fleet); ``clients`` is the
        address range a ``pg_hba`` line lets in (trust) besides loopback."""
        self.host, self.prefix, self.clients = host, list(prefix), clients
        self.port = port or free_port()
        self.dir = directory or Path(tempfile.mkdtemp(prefix="fault-pg-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.data = self.dir / "data"
        self.restarts = 0
        shutil.chown(self.dir, "postgres", "postgres")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@{self.host}:{self.port}/postgres"

    def _as_postgres(self, *cmd: str, timeout: float = 120) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(
            [*self.prefix, *prefix, *cmd],
            check=True,
            timeout=timeout,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def init(self) -> None:
        self._as_postgres("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        if self.clients:
            with open(self.data / "pg_hba.conf", "a") as fh:
                fh.write(f"host all all {self.clients} trust\n")
        with open(self.data / "postgresql.conf", "a") as fh:
            fh.write(
                f"listen_addresses = '{self.host}'\nport = {self.port}\nunix_socket_directories = '{self.dir}'\n"
                # fsync off only skips flushing the OS cache, which a restart of PostgreSQL (not of
                # the machine) keeps; commits stay synchronous: an acknowledged commit survives.
                "fsync = off\nsynchronous_commit = on\nshared_buffers = 32MB\n"
                "max_connections = 200\n"
            )
        self.start()

    def start(self) -> None:
        self._as_postgres(
            "pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-w", "-t", "60", "start"
        )

    def stop(self, mode: str = "fast") -> None:
        self._as_postgres("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, down_for: float = 0.0, mode: str = "immediate") -> None:
        self.stop(mode)
        time.sleep(down_for)
        self.start()
        self.restarts += 1

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


class CeleryWorker(WorkerProcess):
    """A real Celery worker for the fault tests, remembering how it was started (to start it again)."""

    def __init__(
        self,
        env: Mapping[str, str],
        log: Path,
        *,
        concurrency: int = 1,
        beat: bool = False,
        prefix: Sequence[str] = (),
    ) -> None:
        self.env, self.beat, self.concurrency, self.prefix = dict(env), beat, concurrency, list(prefix)
        self.replaced = False
        super().__init__(
            ["tests.faults.celery_worker"],
            env,
            log,
            concurrency=concurrency,
            beat=beat,
            name="f",
            prefix=prefix,
        )

    def wait_ready(self, timeout: float = 60) -> CeleryWorker:
        wait_for(self.ready, timeout, "the Celery worker to be ready", interval=0.1)
        return self


def fired(fault_dir: Path) -> list[tuple[float, int, str, str, str]]:
    """The faults that fired, from ``fired.log``: (time, pid, point, action, key)."""
    path = fault_dir / "fired.log"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        at, pid, point, action, key = (line.split(" ", 4) + [""])[:5]
        out.append((float(at), int(pid), point, action, key))
    return out


def arm(fault_dir: Path, rule: str) -> Path:
    """Arm one fault that fires once across every process watching ``fault_dir``."""
    path = fault_dir / f"f{time.monotonic_ns()}"
    tmp = path.with_name("." + path.name)
    tmp.write_text(rule)
    tmp.rename(path)  # appear whole: a watcher never reads half a rule
    return path
