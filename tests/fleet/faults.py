"""The fleet's fault kinds: each one applied, held for a while, then healed, while unwinds run.

A fault that targets one worker lands mid-step when it can: it waits (a bounded while) until the ledger
shows a compensate hook in flight from a process of that host. ``Landed`` says when the fault began
and healed, which worker processes it excuses from the checker's overlap rule (a frozen holder's
hook may still be inside when its successor runs; the provider's key deduplicates those) and what it
reports in the per-kind table.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.faults.ledger import Ledger

from .hosts import Fleet, namespace_pids
from .network import HOSTS, Network

WORKERS = ("worker-a", "worker-b")
PG_PORT, REDIS_PORT = 5432, 6379

KINDS = (
    "partition from PostgreSQL",
    "partition from Redis",
    "slow lossy network",
    "frozen host",
    "PostgreSQL restarted",
    "PostgreSQL backends killed",
    "Redis restarted without its data",
)


@dataclass
class Landed:
    kind: str
    target: str
    began: float  # wall clock (every namespace shares the kernel's clock; only worker-b's is faked)
    healed: float = 0.0
    mid_step: bool = False
    excused: list[int] = field(default_factory=list)


class Faults:
    def __init__(self, fleet: Fleet, net: Network, ledger: Ledger, rng: random.Random) -> None:
        self.fleet, self.net, self.ledger, self.rng = fleet, net, ledger, rng
        self.claim_ttl = float(fleet.timing["claim_ttl"])  # holds scale with the lease they outlast

    def in_flight_on(self, host: str) -> bool:
        pids = set(namespace_pids(HOSTS[host].ns))
        try:
            return any(pid in pids for pid in self.ledger.in_flight("compensate"))
        except Exception:  # the provider is never faulted, but a loaded machine may time a query out
            return False

    def wait_mid_step(self, host: str, limit_s: float = 4.0) -> bool:
        """Wait (at most ``limit_s``) until a hook of ``host`` is in flight, so the fault lands mid-step."""
        ends = time.monotonic() + limit_s
        while time.monotonic() < ends:
            if self.in_flight_on(host):
                return True
            time.sleep(0.02)
        return False

    def apply(self, kind: str) -> tuple[Landed, float, Callable[[], None]]:
        """Land ``kind``; returns what landed, how long to hold it (s) and how to heal it."""
        worker = self.rng.choice(WORKERS)
        if kind == "partition from PostgreSQL":
            mid = self.wait_mid_step(worker)
            self.net.partition(worker, "db", PG_PORT)
            landed = Landed(kind, worker, time.time(), mid_step=mid)
            return (
                landed,
                self.rng.uniform(self.claim_ttl, 3 * self.claim_ttl),
                lambda: self.net.heal(worker, "db", PG_PORT),
            )
        if kind == "partition from Redis":
            mid = self.wait_mid_step(worker)
            self.net.partition(worker, "db", REDIS_PORT)
            landed = Landed(kind, worker, time.time(), mid_step=mid)
            return (
                landed,
                self.rng.uniform(self.claim_ttl, 3 * self.claim_ttl),
                lambda: self.net.heal(worker, "db", REDIS_PORT),
            )
        if kind == "slow lossy network":
            loss = self.rng.choice((0.02, 0.05, 0.1))
            for w in WORKERS:
                self.net.degrade(w, "db", loss)
            landed = Landed(kind, f"both workers, loss {loss:.0%}", time.time())

            def restore() -> None:
                for w in WORKERS:
                    self.net.restore(w, "db")

            return landed, self.rng.uniform(3, 8), restore
        if kind == "frozen host":
            mid = self.wait_mid_step(worker)
            pids = self.fleet.freeze(worker)
            landed = Landed(kind, worker, time.time(), mid_step=mid, excused=pids)
            return landed, 2 * self.claim_ttl + self.rng.uniform(0.5, 2.0), lambda: self.fleet.thaw(pids)
        if kind == "PostgreSQL restarted":
            landed = Landed(kind, "db", time.time())
            self.fleet.journal_pg.restart(down_for=self.rng.uniform(0.5, 2.0))
            return landed, 0.0, lambda: None
        if kind == "PostgreSQL backends killed":
            landed = Landed(kind, "db", time.time())
            landed.target = f"db ({self.fleet.kill_backends()} backends)"
            return landed, 0.0, lambda: None
        if kind == "Redis restarted without its data":
            landed = Landed(kind, "db", time.time())
            self.fleet.dep.redis.restart(down_for=self.rng.uniform(0.5, 1.5))
            return landed, 0.0, lambda: None
        raise ValueError(kind)
