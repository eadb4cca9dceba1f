"""A Celery deployment for the fault suite: the suite's own Redis (broker, results, step locks) on a
spare loopback port, the session's PostgreSQL journal, workers started and killed at will."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery

from saga_worker.celery import make_app
from saga_worker.settings import SagaSettings

from .harness import CeleryWorker, OwnRedis

SAGA = {
    "claim_ttl": "2",
    "sweep_interval": "1",
    "sweep_backoff": "0.5",
    "sweep_backoff_max": "2",
    "visibility_timeout": "6",
}


@dataclass
class Deployment:
    tmp: Path
    journal_url: str
    base_env: dict[str, str]
    redis: OwnRedis
    queue: str = field(default_factory=lambda: f"fault-{uuid.uuid4().hex[:8]}")
    workers: list[CeleryWorker] = field(default_factory=list)
    _client: Celery | None = None

    @property
    def fault_dir(self) -> Path:
        path = self.tmp / "faults"
        path.mkdir(exist_ok=True)
        return path

    def saga(self) -> dict[str, str]:
        r = self.redis.url.rsplit("/", 1)[0]
        return {
            **SAGA,
            "journal_url": self.journal_url,
            "broker_url": f"{r}/0",
            "result_backend": f"{r}/1",
            "redis_url": f"{r}/2",
            "queue": self.queue,
            "home": str(self.tmp / "home"),
            "tools": "tests.faults.toolkit:TOOLS",
        }

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in self.base_env.items() if not k.startswith("SAGA_")}
        env.update({f"SAGA_{k.upper()}": v for k, v in self.saga().items()})
        env["SAGA_FAULTS_DIR"] = str(self.fault_dir)
        env.update(extra)
        return env

    def start_worker(
        self, *, beat: bool = False, concurrency: int = 1, prefix: Sequence[str] = (), **extra: str
    ) -> CeleryWorker:
        """``prefix``: what the worker runs under (``ip netns exec NS``: a host of tests/fleet)."""
        worker = CeleryWorker(
            self.env(**extra),
            self.tmp / f"worker-{len(self.workers)}.log",
            beat=beat,
            concurrency=concurrency,
            prefix=prefix,
        )
        self.workers.append(worker)
        return worker.wait_ready()

    def supervise(self) -> list[str]:
        """Restart every worker whose process has exited, as a supervisor does in production
        (docker-compose ``restart: unless-stopped``); the last log lines of each crash."""
        crashes = []
        for worker in list(self.workers):
            if worker.replaced or worker.proc.poll() is None:
                continue
            worker.replaced = True
            crashes.append(worker.tail(3))
            fresh = CeleryWorker(
                worker.env,
                self.tmp / f"worker-{len(self.workers)}.log",
                beat=worker.beat,
                concurrency=worker.concurrency,
                prefix=worker.prefix,
            )
            self.workers.append(fresh)
            fresh.wait_ready()
        return crashes

    def client(self) -> Celery:
        if self._client is None:
            self._client = make_app(SagaSettings(**self.saga()), main="fault-client")  # type: ignore[arg-type]  # strings, as the environment gives them
        return self._client

    def send(
        self, run_id: str, *, task_id: str | None = None, parallel: bool = False, dry_run: bool = False
    ) -> Any:
        kwargs: dict[str, Any] = (
            {"parallel": True} if parallel else {}
        )  # sent only when asked, as the product does
        if dry_run:
            kwargs["dry_run"] = True
        return self.client().send_task("saga.compensate_run", args=[run_id], kwargs=kwargs, task_id=task_id)

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
        self.redis.close()
