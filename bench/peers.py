"""saga-worker's in-process unwind next to its peers and to the floors a durable commit sets (issue 26).

Interleaved rounds, rotating which goes first, so load from other processes hits all alike:

- saga-worker: ``compensate_run`` of seeded 5-step no-op runs (SQLite, then PostgreSQL journal);
- agent-saga 2.3.11 (fsync'd ``FileWAL``) and dbos 3.4.0 (SQLite system database; on the PostgreSQL
  table, a PostgreSQL one), each in a child process of the bench's own peer environment
  (``bench/.peers``, built by ``make bench`` from bench/peers.txt: never the product's dependencies),
  timed over the unwind alone (bench/peer_child.py says how);
- the floors: a bare SQLite INSERT+COMMIT loop in WAL mode at ``synchronous=FULL`` (one fsync per
  commit), and a bare PostgreSQL INSERT+COMMIT loop on one connection (psycopg, ``synchronous_commit``
  as the server has it);
- the contract's own floor: the bare writes an unwind cannot do without (bench/bare.py: the
  tombstone, a claim and an outcome per step, the end; 2n+2 commits with the journal's durability),
  straight through the driver. Its ratio to a floor or a peer is the most any implementation of the
  contract could reach on this machine; saga-worker's ratio to it is what its own Python costs.

Ratios here are *speed* ratios, compensations/s ÷ the other's rate per round, median over the rounds
(issue 26's targets: ≥ 2.0 against agent-saga and the SQLite floor, ≥ 1.0 against the PostgreSQL
floor); the "cost vs floor" column keeps this page's convention (the inverse).
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.bare import BareWriter
from bench.common import Backend, PgDatabase, Row, Table, interleaved
from bench.config import Config
from bench.inprocess import STEPS, _chunks, _seeded
from bench.seed import noop_tools
from saga_worker import compensate_run

PEERS_DIR = Path(__file__).resolve().parent / ".peers"
PEER_PYTHON = PEERS_DIR / "bin" / "python"
CHILD = Path(__file__).resolve().parent / "peer_child.py"
AGENT_SAGA = "agent-saga 2.3.11"
DBOS = "dbos 3.4.0"


Measured = tuple[int, float, float]  # units, seconds, CPU seconds (of the process that did them)


class Peer:
    """A peer's child process: one round per request, answered with compensations and seconds."""

    def __init__(self, name: str, backend: str, directory: str, pg_url: str = "") -> None:
        peer = name.split()[0]
        self.proc = subprocess.Popen(
            [str(PEER_PYTHON), str(CHILD), peer, backend, directory, pg_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "DBOS__CLOUD": "", "PYTHONWARNINGS": "ignore"},
        )
        self._read()  # {"ready": true}

    def _read(self) -> dict[str, float]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"peer child exited with {self.proc.wait()}")
        answer: dict[str, float] = json.loads(line)
        return answer

    def round(self, runs: int) -> Measured:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{runs}\n")
        self.proc.stdin.flush()
        answer = self._read()
        return int(answer["compensations"]), answer["seconds"], answer["cpu"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _timed(
    fns: dict[str, Callable[[int], Measured]], rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Like ``interleaved``, but each callable reports its own units, seconds and CPU seconds (a peer
    times its unwind alone, inside its process): per-round rates, and CPU µs per unit, by name."""
    timed: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}

    def wrap(name: str) -> Callable[[int], int]:
        def one(i: int) -> int:
            units, seconds, cpu_seconds = fns[name](i)
            timed[name].append(units / seconds)
            cpu[name].append(cpu_seconds / units * 1e6)
            return units

        return one

    interleaved({name: wrap(name) for name in fns}, rounds)
    return timed, cpu


def _sqlite_floor(directory: str) -> Callable[[int], Measured]:
    import time

    conn = sqlite3.connect(f"{directory}/floor-full.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    counter = iter(range(10**9))

    def commits(n: int) -> Measured:
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (?, 'x')", (next(counter),))
            conn.execute("COMMIT")
        return n, time.perf_counter() - start, time.process_time() - cpu

    return commits


def _pg_floor(url: str) -> tuple[Callable[[int], Measured], Callable[[], None]]:
    import time

    import psycopg

    conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
    cur = conn.cursor()
    cur.execute("CREATE TABLE floor_peers (k BIGINT PRIMARY KEY, v TEXT)")
    conn.commit()
    counter = iter(range(10**9))

    def commits(n: int) -> Measured:
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            cur.execute("INSERT INTO floor_peers VALUES (%s, 'x')", (next(counter),))
            conn.commit()
        return n, time.perf_counter() - start, time.process_time() - cpu

    return commits, conn.close


def _ours(backend: Backend, runs: int, rounds: int) -> Callable[[int], Measured]:
    import time

    tools = noop_tools()
    work = _chunks(_seeded(backend, runs, STEPS, "peer"), rounds)

    def unwind(i: int) -> Measured:
        start, cpu = time.perf_counter(), time.process_time()
        for run_id in work[i]:
            report = compensate_run(run_id, journal=backend.journal, tools=tools)
            assert report.complete, report
        return len(work[i]) * STEPS, time.perf_counter() - start, time.process_time() - cpu

    return unwind


def _contract(
    backend: Backend, runs: int, rounds: int
) -> tuple[Callable[[int], Measured], Callable[[], None]]:
    """The contract's bare writes (``BareWriter.unwind``) for runs seeded like ours, a round at a time."""
    import time

    assert backend.engine is not None
    bare = BareWriter(backend.engine)
    work = _chunks(_seeded(backend, runs, STEPS, "bare"), rounds)

    def unwind(i: int) -> Measured:
        start, cpu = time.perf_counter(), time.process_time()
        for run_id in work[i]:
            bare.unwind(run_id, STEPS)
        return len(work[i]) * STEPS, time.perf_counter() - start, time.process_time() - cpu

    return unwind, bare.close


def _contract_rows(kind: str, rates: dict[str, list[float]], floor: str, peer: str = "") -> list[Row]:
    """What the contract's bare writes reach against the floor (and the peer): the ceiling of a
    target set against it. Then saga-worker against those bare writes: what its own Python costs."""
    bare = rates["contract"]
    others = [(floor, rates["floor"])] + ([(peer, rates[peer])] if peer in rates else [])
    rows = [
        _row(f"{kind}: the contract's bare writes vs {name} (the ceiling)", bare, r, name, None)
        for name, r in others
    ]
    rows.append(
        _row(
            f"{kind}: unwind vs the contract's bare writes",
            rates["saga-worker"],
            bare,
            "2n+2 bare commits (the contract's writes, one commit each)",
            None,
        )
    )
    return rows


def _cpu_row(
    name: str, ours: list[float], other: list[float], other_name: str, target: float | None = None
) -> Row:
    """CPU per compensation (µs, process time of the process that ran it): less moved by load than
    wall time, since waiting for a core or the disk is not counted."""
    mine, theirs = statistics.median(ours), statistics.median(other)
    return Row(
        name,
        mine,
        "CPU µs/compensation",
        other_name,
        theirs,
        mine / theirs,
        target="" if target is None else f"<= {target:g}x",
        ok=None if target is None else mine / theirs <= target,
        note=f"medians of {len(ours)} rounds; the floor's per commit",
    )


def _peer_rounds(peer: Peer, runs: int) -> Callable[[int], Measured]:
    return lambda _i: peer.round(runs)


def _row(name: str, ours: list[float], other: list[float], other_name: str, target: float | None) -> Row:
    speed = [o / f for o, f in zip(ours, other, strict=True)]
    median = statistics.median(speed)
    return Row(
        name,
        statistics.median(ours),
        "compensations/s",
        other_name,
        statistics.median(other),
        statistics.median(f / o for o, f in zip(ours, other, strict=True)),
        f">= {target:.1f}x its rate" if target is not None else "",
        (median >= target) if target is not None else None,
        f"{median:.2f}x its rate (per round {min(speed):.2f}-{max(speed):.2f}); {len(ours)} rounds",
    )


def _available() -> str:
    if not PEER_PYTHON.exists():
        return f"no {PEERS_DIR} (make bench builds it from bench/peers.txt)"
    return ""


def sqlite_rows(cfg: Config) -> list[Row]:
    rounds = cfg.peer_rounds
    runs = cfg.peer_runs
    missing = _available()
    with Backend("sqlite") as backend, tempfile.TemporaryDirectory(prefix="saga-bench-peers-") as tmp:
        contract, close_contract = _contract(backend, runs * rounds, rounds)
        fns: dict[str, Callable[[int], Measured]] = {
            "saga-worker": _ours(backend, runs * rounds, rounds),
            "floor": _sqlite_floor(tmp),
            "contract": contract,
        }
        floor_commits = fns["floor"]
        fns["floor"] = lambda _i: floor_commits(runs * STEPS)
        peers: list[Peer] = []
        try:
            if not missing:
                agent = Peer(AGENT_SAGA, "sqlite", tmp)
                peers.append(agent)
                fns[AGENT_SAGA] = _peer_rounds(agent, runs)
                dbos = Peer(DBOS, "sqlite", tmp)
                peers.append(dbos)
                # dbos commits each step in SQLite's default (rollback-journal, FULL) mode: ~50/s
                # here, so a tenth of the runs keeps its rounds as long as the others'.
                fns[DBOS] = _peer_rounds(dbos, max(2, runs // 10))
            rates, cpu = _timed(fns, rounds)
        finally:
            for peer in peers:
                peer.close()
            close_contract()
    ours = rates["saga-worker"]
    cpu_rows = [
        _cpu_row(f"sqlite: CPU per compensation vs {name}", cpu["saga-worker"], cpu[name], label, target)
        for name, label, target in (
            ("floor", "bare commit, synchronous=FULL", None),
            (AGENT_SAGA, AGENT_SAGA, 0.35),  # issue 45
        )
        if name in cpu
    ]
    rows = [
        _row(
            "sqlite: unwind vs bare INSERT+COMMIT, synchronous=FULL",
            ours,
            rates["floor"],
            "bare commits/s, 1 fsync each",
            2.0,
        )
    ]
    contract_rows = _contract_rows("sqlite", rates, "bare commit, synchronous=FULL", AGENT_SAGA)
    if missing:
        rows.append(Row(f"sqlite: unwind vs peers: skipped, {missing}", None, ""))
        return rows + contract_rows
    rows.append(_row(f"sqlite: unwind vs {AGENT_SAGA}", ours, rates[AGENT_SAGA], "fsync'd FileWAL", 2.5))
    rows.append(_row(f"sqlite: unwind vs {DBOS}", ours, rates[DBOS], "SQLite system db", None))
    return rows + contract_rows + cpu_rows


def postgres_rows(cfg: Config) -> list[Row]:
    rounds = cfg.peer_rounds
    runs = cfg.peer_runs
    missing = _available()
    dbos_db = PgDatabase()
    try:
        with Backend("postgres") as backend, tempfile.TemporaryDirectory(prefix="saga-bench-peers-") as tmp:
            floor_commits, close_floor = _pg_floor(backend.url)
            contract, close_contract = _contract(backend, runs * rounds, rounds)
            fns: dict[str, Callable[[int], Measured]] = {
                "saga-worker": _ours(backend, runs * rounds, rounds),
                "floor": lambda _i: floor_commits(runs * STEPS),
                "contract": contract,
            }
            peers: list[Peer] = []
            try:
                if not missing:
                    url = dbos_db.url.replace("postgresql+psycopg://", "postgresql://")
                    dbos = Peer(DBOS, "postgres", tmp, url)
                    peers.append(dbos)
                    fns[DBOS] = _peer_rounds(dbos, max(2, runs // 4))
                rates, cpu = _timed(fns, rounds)
            finally:
                for peer in peers:
                    peer.close()
                close_floor()
                close_contract()
    finally:
        dbos_db.drop()
    ours = rates["saga-worker"]
    rows = [
        _row(
            "postgres: unwind vs bare INSERT+COMMIT, one connection",
            ours,
            rates["floor"],
            "bare commits/s",
            1.0,
        )
    ]
    if missing:
        rows.append(Row(f"postgres: unwind vs peers: skipped, {missing}", None, ""))
    else:
        rows.append(_row(f"postgres: unwind vs {DBOS}", ours, rates[DBOS], "PostgreSQL system db", None))
    # The unwind's own CPU: what is left of its cost once its round trips are as few as the contract allows.
    cpu_row = _cpu_row(
        "postgres: CPU per compensation vs bare INSERT+COMMIT",
        cpu["saga-worker"],
        cpu["floor"],
        "bare commit",
    )
    return [*rows, *_contract_rows("postgres", rates, "bare INSERT+COMMIT"), cpu_row]


def run(cfg: Config) -> list[Table]:
    table = Table(
        "Peers and durable-commit floors: in-process unwind of 5-step no-op runs, compensations/s",
        caption=(
            "interleaved rounds; note = saga-worker's rate ÷ the other's (speed, higher is better); "
            "cost vs floor = the inverse, as elsewhere on this page; peers from bench/.peers"
        ),
    )
    if "sqlite" in cfg.backends(["sqlite"]):
        table.rows.extend(sqlite_rows(cfg))
    if "postgres" in cfg.backends(["postgres"]):
        table.rows.extend(postgres_rows(cfg))
    return [table]
