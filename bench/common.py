"""What every bench group shares: the services, timing side by side with a floor, and result rows.

Every figure is measured next to the floor that bounds it, in alternating rounds (floor, measured,
floor, measured, ...), so that load from other processes on this shared machine hits both alike and
cancels in their ratio. The ratio is always a *cost* ratio: time per unit measured / time per unit
of the floor (1.0 = as cheap as the floor; 3.0 = three times its cost).
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlalchemy as sa

# Loopback services only. A Redis database number and queue names of our own: other people run
# tests against the same servers at the same time.
REDIS_URL = os.environ.get("SAGA_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
PG_ADMIN_URL = os.environ.get("SAGA_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
QUEUE_PREFIX = "saga-bench"


@dataclass
class Row:
    """One line of a result table: a figure, the floor it is bounded by, and their cost ratio."""

    name: str
    value: float | None
    unit: str
    floor_name: str = ""
    floor: float | None = None
    ratio: float | None = None  # cost ratio, measured / floor (see module docstring)
    target: str = ""
    ok: bool | None = None
    note: str = ""


@dataclass
class Table:
    title: str
    rows: list[Row] = field(default_factory=list)
    caption: str = ""

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row


@dataclass
class Paired:
    """Per-round rates (units per second) of a measured thing and of its floor."""

    measured: list[float]
    floor: list[float]

    @property
    def rate(self) -> float:
        return statistics.median(self.measured)

    @property
    def floor_rate(self) -> float:
        return statistics.median(self.floor)

    @property
    def cost_ratio(self) -> float:
        # Median of per-round ratios: each round's pair ran back to back under the same load.
        return statistics.median(f / m for m, f in zip(self.measured, self.floor, strict=True))


def rate(units: int, work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return units / (time.perf_counter() - start)


def paired(measured: Callable[[int], int], floor: Callable[[int], int], rounds: int) -> Paired:
    """Alternate floor and measured ``rounds`` times; each callable does round ``i`` and returns its units."""
    out = Paired([], [])
    for i in range(rounds):
        # Alternate which goes first, so neither always inherits the other's warm caches.
        order = [(floor, out.floor), (measured, out.measured)]
        for fn, sink in order if i % 2 == 0 else reversed(order):
            start = time.perf_counter()
            units = fn(i)
            sink.append(units / (time.perf_counter() - start))
    return out


def interleaved(fns: dict[str, Callable[[int], int]], rounds: int) -> dict[str, list[float]]:
    """Run each callable once per round, ``rounds`` times, rotating which goes first; per-round rates
    by name. A measured figure and several floors, under the same load in every round."""
    names = list(fns)
    out: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            units = fns[name](i)
            out[name].append(units / (time.perf_counter() - start))
    return out


def cost_ratio(measured: list[float], floor: list[float]) -> float:
    """Median of per-round cost ratios (floor rate / measured rate): 1.0x = as cheap as the floor."""
    return statistics.median(f / m for m, f in zip(measured, floor, strict=True))


def solo(measured: Callable[[int], int], rounds: int) -> float:
    """Median rate over ``rounds`` rounds of something with no floor of its own."""
    rates = []
    for i in range(rounds):
        start = time.perf_counter()
        units = measured(i)
        rates.append(units / (time.perf_counter() - start))
    return statistics.median(rates)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"  # 64 bits: no collision among 10^6 ids


class PgDatabase:
    """A PostgreSQL database of our own for one bench session, dropped at the end."""

    def __init__(self) -> None:
        self.name = f"saga_bench_{uuid.uuid4().hex[:8]}"
        self._admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with self._admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{self.name}"'))
        self.url = (
            sa.engine.make_url(PG_ADMIN_URL).set(database=self.name).render_as_string(hide_password=False)
        )

    def drop(self) -> None:
        with self._admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        self._admin.dispose()


def reachable(host: str, port: int) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


class Backend:
    """A fresh journal of one kind for one measurement, removed afterwards."""

    def __init__(self, kind: str) -> None:
        import tempfile

        from saga_worker import open_journal

        self.kind = kind
        self._pg: PgDatabase | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if kind == "memory":
            url = "memory://"
        elif kind == "sqlite":
            self._tmp = tempfile.TemporaryDirectory(prefix="saga-bench-")
            url = f"sqlite:///{self._tmp.name}/journal.db"
        elif kind == "postgres":
            self._pg = PgDatabase()
            url = self._pg.url
        else:
            raise ValueError(kind)
        self.url = url
        self.journal = open_journal(url, migrate=True)
        self.engine: sa.Engine | None = getattr(self.journal, "engine", None)

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.journal.close()
        if self._pg is not None:
            self._pg.drop()
        if self._tmp is not None:
            self._tmp.cleanup()
