"""The fleet's hosts and what runs on each: on ``db`` a PostgreSQL cluster (the journal) and a
redis-server (broker, results, step locks) of the fleet's own; on ``provider`` the ledger's
PostgreSQL (the external provider, reached by every hook and never cut by a fault); on ``worker-a`` and
``worker-b`` a real Celery worker each (prefork, concurrency 2; beat on ``worker-a``) and a delayer for
the slow-network fault; ``worker-b`` runs under libfaketime, its clocks ``SKEW_S`` ahead for its whole
life. (A skew changed while it runs is not used: libfaketime 0.9.10 then either makes the monotonic
clock jump back or, with ``DONT_FAKE_MONOTONIC``, fails Python's ``time.sleep`` with EINVAL.)

Every process is started inside its host's namespace (``ip netns exec``), so the processes of the
fleet are exactly the processes in its namespaces: ``stop_leftovers`` ends them by process id (found
with ``ip netns pids``), which is how a run cleans what an interrupted one left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from saga_worker.settings import SagaSettings
from tests.faults.deployment import SAGA, Deployment
from tests.faults.harness import REPO, OwnPostgres, OwnRedis, Proc

from .network import DELAY_QUEUE, HOSTS, SUBNET, Host, fleet_namespaces, sh

STATE = Path(os.environ.get("SAGA_FLEET_STATE", "/tmp/saga-fleet"))
FAKETIME_LIBS = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
)
SKEWED = "worker-b"
SKEW_S = 5  # worker-b's clocks ahead by this much, past the fleet's 2 s claim TTL

# The settings that decide how soon an unwind is back after a fault: the fault suite's short ones
# (as the soak runs), or saga-worker's defaults (``--defaults``: what an untuned fleet gets).
TIMING = ("claim_ttl", "sweep_interval", "sweep_backoff", "sweep_backoff_max", "visibility_timeout")
FLEET_TIMING = {**{k: SAGA[k] for k in TIMING}, "sweep_max_attempts": "30"}
DEFAULT_TIMING = {k: f"{SagaSettings.model_fields[k].default:g}" for k in (*TIMING, "sweep_max_attempts")}


def faketime_lib() -> str:
    for path in FAKETIME_LIBS:
        if Path(path).exists():
            return path
    raise RuntimeError("libfaketime is not installed (apt-get install faketime; .ci/programs does it)")


def namespace_pids(ns: str) -> list[int]:
    out = sh("ip", "netns", "pids", ns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def stop_leftovers() -> None:
    """SIGKILL every process inside a namespace of the fleet (a run interrupted before its own
    teardown leaves them), then remove the fleet's state folder."""
    for _ in range(3):
        pids = [pid for ns in fleet_namespaces() for pid in namespace_pids(ns) if pid != os.getpid()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    shutil.rmtree(STATE, ignore_errors=True)


@dataclass
class Fleet:
    """The servers and workers of one fleet run; ``start`` brings them up, ``close`` ends them."""

    dep: Deployment = field(init=False)
    journal_pg: OwnPostgres = field(init=False)
    ledger_pg: OwnPostgres = field(init=False)
    timing: dict[str, str] = field(default_factory=lambda: dict(FLEET_TIMING))
    delayers: list[Proc] = field(default_factory=list)

    def host(self, name: str) -> Host:
        return HOSTS[name]

    def start(self) -> None:
        STATE.mkdir(parents=True, exist_ok=True)
        db, provider = HOSTS["db"], HOSTS["provider"]
        clients = f"{SUBNET}.0/24"
        self.journal_pg = OwnPostgres(
            host=db.ip, port=5432, directory=STATE / "db-pg", prefix=db.exec_prefix(), clients=clients
        )
        self.ledger_pg = OwnPostgres(
            host=provider.ip,
            port=5432,
            directory=STATE / "provider-pg",
            prefix=provider.exec_prefix(),
            clients=clients,
        )
        self.journal_pg.init()
        self.ledger_pg.init()
        redis = OwnRedis(
            persistent=False, port=6379, host=db.ip, directory=STATE / "db-redis", prefix=db.exec_prefix()
        )
        redis.dir.mkdir(parents=True, exist_ok=True)
        redis.start()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SAGA_", "FAULT_"))}
        env.update(
            FAULT_LEDGER_URL=self.ledger_pg.url, PYTHONPATH=str(REPO), SAGA_TOOLS="tests.faults.toolkit:TOOLS"
        )
        self.dep = Deployment(STATE, self.journal_pg.url, env, redis)

    def start_workers(self, breaks: str = "") -> None:
        """``breaks``: names from tests/faults/breaks.py to break the workers with (proving the
        fleet's checker bites: ``python -m tests.fleet --break no-fencing`` must report the damage)."""
        self.start_delayers()
        timing = self.timing_env()
        self.dep.start_worker(
            beat=True, concurrency=2, prefix=HOSTS["worker-a"].exec_prefix(), FAULT_BREAK=breaks, **timing
        )
        self.dep.start_worker(
            concurrency=2,
            prefix=HOSTS[SKEWED].exec_prefix(),
            FAULT_BREAK=breaks,
            **self.skew_env(),
            **timing,
        )

    def timing_env(self) -> dict[str, Any]:
        return {f"SAGA_{k.upper()}": v for k, v in self.timing.items()}

    @staticmethod
    def skew_env() -> dict[str, Any]:
        """What puts a process on the skewed host's clock (libfaketime, ``SKEW_S`` ahead)."""
        return {"LD_PRELOAD": faketime_lib(), "FAKETIME": f"+{SKEW_S}"}

    def start_delayers(self) -> None:
        """The slow-network fault's delayer on each worker host."""
        for name in ("worker-a", "worker-b"):
            proc = Proc(
                [
                    *HOSTS[name].exec_prefix(),
                    sys.executable,
                    "-m",
                    "tests.fleet.delayer",
                    str(DELAY_QUEUE),
                    "40",
                ],
                os.environ,
                log=STATE / f"delayer-{name}.log",
            )
            self.delayers.append(proc)

    def worker_pids(self, host: str) -> list[int]:
        """Every process on a worker host but its delayer (the worker's main process, pool, beat)."""
        delayers = {p.pid for p in self.delayers}
        return [pid for pid in namespace_pids(HOSTS[host].ns) if pid not in delayers]

    def freeze(self, host: str) -> list[int]:
        pids = self.worker_pids(host)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        return pids

    def thaw(self, pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def kill_backends(self) -> int:
        """Terminate every client backend of the journal's PostgreSQL; how many."""
        import psycopg

        from tests.faults.ledger import dsn

        with psycopg.connect(dsn(self.journal_pg.url), autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchall()
        return len(rows)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.dep.close()
        for proc in self.delayers:
            with contextlib.suppress(Exception):
                proc.kill()
        for pg in (getattr(self, "journal_pg", None), getattr(self, "ledger_pg", None)):
            if pg is not None:
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    pg.stop("immediate")
