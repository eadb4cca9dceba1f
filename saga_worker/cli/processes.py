"""Starting Celery processes: the argv for `celery -A saga_worker.celery:app`, a worker in its own process
group for the demo, and stopping that group so that no child outlives the command."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from ..settings import SagaSettings

CELERY_APP = "saga_worker.celery:app"  # the library's own app: no top-level package needed


def celery() -> Any:
    """saga_worker.celery, imported on demand (the commands that only read the journal need no Celery)."""
    return importlib.import_module("saga_worker.celery")


def celery_argv(command: str, extra: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", CELERY_APP, command, *extra]


def with_default_loglevel(extra: Sequence[str]) -> list[str]:
    args = list(extra)
    if not any(a.startswith(("-l", "--loglevel")) for a in args):
        args += ["--loglevel", "info"]
    return args


def prepare_metrics_folder(settings: SagaSettings) -> None:
    """With SAGA_METRICS_PORT, the pool's children count in files of a folder the main process reads
    (prometheus_client's multiprocess mode). It must be set before anything imports the client, and
    start empty: files left by an earlier worker would add its counts to this one's."""
    if settings.metrics_port is None:
        return
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not folder:
        import tempfile

        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="saga-metrics-")
        return
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        if name.endswith(".db"):
            os.unlink(os.path.join(folder, name))


@contextmanager
def embedded_worker(
    settings: SagaSettings, *, tools: str, log_path: str | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A real `celery -A saga_worker.celery:app worker -B` in its own process group, loading ``tools``
    (a ``SAGA_TOOLS`` spec: the demo names its own), stopped (and reaped) on exit."""
    env = dict(os.environ, SAGA_HOME=str(settings.home.resolve()), SAGA_TOOLS=tools)
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        celery_argv(
            "worker", ["-B", "--loglevel", "warning", "--concurrency", "1", "-n", f"demo-{os.getpid()}@%h"]
        ),
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        # The work is done and acked; an embedded beat takes ~6 s to wind down, so do not wait for it
        # long (a beat killed mid-write of its schedule file recreates the file on its next start).
        stop_process_group(proc, grace=2.0)
        if log_path:
            log.close()  # type: ignore[union-attr]


def stop_process_group(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """Warm-stop a worker (SIGTERM to its main process), then kill its whole group if it lingers."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
