"""Where the time of a compensated step goes: each journal and lock call timed, per step.

Runs five-step unwinds in this process, both ways a step can be driven: ``compensate_run`` (the
in-process engine) and the Celery executor's own functions (``start_unwind``, ``run_step``,
``finalize_unwind``: exactly what the three task bodies call, minus Celery). Every call on the
journal and the Redis step lock is wrapped with a timer; what is left is the engine's own Python.
``python -m bench --only profile --pyinstrument`` also prints pyinstrument's call tree.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from bench.common import REDIS_URL, Backend, Row, Table, new_id
from bench.config import Config
from bench.seed import noop_tools, seed
from saga_worker import compensate_run

STEPS = 5


class Timed:
    """Wraps an object's methods so that each call adds its duration to a per-method total."""

    def __init__(self, target: Any, prefix: str, totals: dict[str, list[float]]) -> None:
        self._target = target
        self._prefix = prefix
        self._totals = totals

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if name.startswith("_") or not callable(value):
            return value
        key = f"{self._prefix}.{name}"
        totals = self._totals

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                slot = totals[key]
                slot[0] += time.perf_counter() - start
                slot[1] += 1

        return timed


def _profile(
    label: str, drive: Callable[[Any, Any, str], None], backend: Backend, runs: int, lock: Any, table: Table
) -> None:
    assert backend.engine is not None
    ids = [new_id("prof") for _ in range(runs + 10)]
    seed(backend.engine, ids, STEPS)
    for run_id in ids[:10]:  # warm the statement caches and the pool
        drive(backend.journal, lock, run_id)
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    journal = Timed(backend.journal, "journal", totals)
    timed_lock = Timed(lock, "lock", totals) if lock is not None else None
    start = time.perf_counter()
    for run_id in ids[10:]:
        drive(journal, timed_lock, run_id)
    elapsed = time.perf_counter() - start
    steps = runs * STEPS
    per_step = elapsed / steps * 1e6
    table.add(Row(f"{label}: whole step", per_step, "µs/step", note=f"{runs} five-step runs"))
    accounted = 0.0
    small = [0.0, 0.0]  # calls under 4% of the step, folded into one row
    for key, (seconds, calls) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        accounted += seconds
        us = seconds / steps * 1e6
        if us < 0.04 * per_step:
            small[0] += us
            small[1] += calls / steps
            continue
        table.add(
            Row(
                f"{label}: {key}",
                us,
                "µs/step",
                note=f"{calls / steps:.1f} calls/step x {seconds / calls * 1e6:.0f} µs; "
                f"{100 * us / per_step:.0f}% of the step",
            )
        )
    if small[1]:
        table.add(
            Row(
                f"{label}: other journal/lock calls",
                small[0],
                "µs/step",
                note=f"{small[1]:.1f} calls/step; {100 * small[0] / per_step:.0f}% of the step",
            )
        )
    rest = (elapsed - accounted) / steps * 1e6
    table.add(
        Row(
            f"{label}: engine's own Python (the rest)",
            rest,
            "µs/step",
            note=f"{100 * rest / per_step:.0f}% of the step",
        )
    )


def _in_process(journal: Any, lock: Any, run_id: str) -> None:
    report = compensate_run(run_id, journal=journal, tools=noop_tools(), lock=lock)
    assert report.complete, report


def _executor(journal: Any, lock: Any, run_id: str) -> None:
    from saga_worker.compensation import chain as ex

    tools = noop_tools()
    unwind_id = f"u-{run_id}"
    nxt = ex.start_unwind(journal, run_id, unwind_id, dry_run=False, claim_ttl=30.0)
    while isinstance(nxt, ex.Step):
        nxt = ex.run_step(journal, tools, run_id, unwind_id, nxt.suffix, claim_ttl=30.0, lock=lock)
        assert nxt is not None
    # As the last step task does (celery/tasks.py): with the unwind it read, and the report whose end
    # it wrote with its outcome, if it did.
    assert isinstance(nxt, ex.Finalize), nxt
    report = ex.finalize_unwind(journal, run_id, unwind_id, info=nxt.info, ended=nxt.report)
    assert report.complete, report


def _round_trips(
    label: str, drive: Callable[[Any, Any, str], None], backend: Backend, lock: Any, table: Table
) -> None:
    """SQL statements, transactions and Redis lock calls per step of 5-step unwinds (counted, not
    timed: a figure that does not move with the machine's load). On PostgreSQL a statement of work
    that is not atomic runs in autocommit, one round trip each; an atomic transaction adds BEGIN and
    COMMIT."""
    from saga_worker.journal import driver

    assert backend.engine is not None
    runs = 20
    ids = [new_id("rt") for _ in range(runs + 2)]
    seed(backend.engine, ids, STEPS)
    for run_id in ids[:2]:
        drive(backend.journal, lock, run_id)
    counts = {"statements": 0, "transactions": 0, "pipelined": 0, "pipelines": 0}
    execute, transaction, batch = driver.Tx.execute, driver.transaction, driver.Tx.batch

    def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["statements"] += 1
        return execute(self, *args, **kwargs)

    def counted_batch(self: Any, items: Any, framed: Any = None) -> Any:
        # Statements sent together in one pipeline (psycopg 3): one round trip for all of them, a
        # durable transaction's BEGIN, SET LOCAL and COMMIT included (``framed``). Where the driver
        # cannot pipeline, batch runs them through execute, which counts them one by one.
        if getattr(self._cursor.connection, "pipeline", None) is not None:
            sent = len(items) + sum(len(plain) for plain in framed or ())
            counts["statements"] += sent
            counts["pipelined"] += sent
            counts["pipelines"] += 1
        return batch(self, items, framed=framed)

    def counted_transaction(*args: Any, **kwargs: Any) -> Any:
        counts["transactions"] += 1
        return transaction(*args, **kwargs)

    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    timed_lock = Timed(lock, "lock", totals) if lock is not None else None
    driver.Tx.execute = counted_execute  # type: ignore[method-assign]
    driver.Tx.batch = counted_batch  # type: ignore[method-assign]
    driver.transaction = counted_transaction  # type: ignore[assignment]
    try:
        for run_id in ids[2:]:
            drive(backend.journal, timed_lock, run_id)
    finally:
        driver.Tx.execute = execute  # type: ignore[method-assign]
        driver.Tx.batch = batch  # type: ignore[method-assign]
        driver.transaction = transaction  # type: ignore[assignment]
    steps = runs * STEPS
    lock_calls = sum(calls for _, calls in totals.values())
    table.add(
        Row(
            f"{label}: SQL statements per step",
            counts["statements"] / steps,
            "statements/step",
            note=f"{counts['statements'] / runs:.0f} per 5-step unwind in "
            f"{counts['transactions'] / runs:.0f} transactions"
            + (
                f" ({counts['pipelined'] / runs:.0f} of them in {counts['pipelines'] / runs:.0f} pipeline, "
                "one round trip each)"
                if counts["pipelines"]
                else ""
            )
            + "; Redis lock calls "
            f"{lock_calls / steps:.1f}/step ("
            + ", ".join(f"{k} {v[1] / steps:.1f}" for k, v in sorted(totals.items()))
            + ")",
        )
    )


def run(cfg: Config) -> list[Table]:
    from saga_worker.locks import open_lock

    table = Table(
        "Where a step's time goes (in this process; journal and lock calls timed one by one)",
        caption="executor = the bodies of saga.compensate_run / compensate_step / finalize_unwind "
        "without Celery, with the Redis step lock the worker uses",
    )
    runs = 60 if cfg.quick else 200
    lock = open_lock(REDIS_URL)
    for kind in cfg.backends(("sqlite", "postgres")):
        with Backend(kind) as backend:
            _profile(f"{kind} compensate_run", _in_process, backend, runs, None, table)
            _profile(f"{kind} executor", _executor, backend, runs, lock, table)
            _round_trips(f"{kind} executor", _executor, backend, lock, table)
    if cfg.extra.get("pyinstrument"):
        _pyinstrument(runs)
    return [table]


def _pyinstrument(runs: int) -> None:
    from pyinstrument import Profiler

    with Backend("sqlite") as backend:
        assert backend.engine is not None
        ids = [new_id("pi") for _ in range(runs)]
        seed(backend.engine, ids, STEPS)
        profiler = Profiler(interval=0.0005)
        profiler.start()
        for run_id in ids:
            _in_process(backend.journal, None, run_id)
        profiler.stop()
        print(profiler.output_text(unicode=True, color=False, show_all=False))
