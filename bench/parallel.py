"""A grouped unwind (issue 47): five steps recorded as one group, 200 ms hooks, undone with
``parallel=True`` and one by one, against the time of one hook; in process, and on a real worker
(Redis broker and results, PostgreSQL journal, a prefork pool of five: as wide as the group).

The floor is one hook's own time (a 200 ms sleep, called directly, in the same round): a group whose
steps are undone side by side costs about one hook plus the journal's writes for five steps, so the
cost ratio is what the unwind adds to the slowest hook (issue 47's targets: at most 1.3x in process,
1.5x on a worker, where the coordinator and the report are tasks of their own too). The sequential
unwind of the same run is beside it (about 5x): the default, unchanged.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from typing import Any

from bench.common import Row, Table
from bench.config import Config
from saga_worker import CallOptions, Tool, compensate_run, open_journal, saga

HOOK_S = 0.2
STEPS = 5


def sleepy_tools() -> dict[str, Tool]:
    """The bench's worker loads these (``SAGA_TOOLS=bench.parallel:sleepy_tools``)."""
    return _tools()


def _tools() -> dict[str, Tool]:
    def undo(input: Any, output: Any, opts: CallOptions) -> None:
        time.sleep(HOOK_S)

    return {f"refund_{i}": Tool(lambda i, o: {"ok": True}, undo) for i in range(STEPS)}


def _recorded(journal: Any, tools: dict[str, Tool]) -> str:
    run_id = f"bench-{uuid.uuid4().hex[:12]}"
    with saga(run_id, journal=journal, tools=tools) as run, run.parallel():
        for name in tools:
            run.call(name, {"n": name})
    return run_id


def _timed_unwind(journal: Any, tools: dict[str, Tool], parallel: bool) -> float:
    run_id = _recorded(journal, tools)
    start = time.perf_counter()
    report = compensate_run(run_id, journal=journal, tools=tools, parallel=parallel)
    took = time.perf_counter() - start
    assert report.complete and {e.group for e in report.entries} == {1}, report
    return took


def _one_hook(tools: dict[str, Tool]) -> float:
    hook = tools["refund_0"].compensate
    assert hook is not None
    start = time.perf_counter()
    hook({}, {}, CallOptions("k", "c", "r"))
    return time.perf_counter() - start


def _on_worker(cfg: Config, rounds: int, table: Table) -> None:
    """The same grouped run unwound by a real worker, ``parallel=True`` and sequential, with one hook
    timed in the same round."""
    from bench.cluster import Cluster

    tools = _tools()
    hooks, side, one = [], [], []
    with Cluster("redis+postgres", concurrency=STEPS, tools="bench.parallel:sleepy_tools") as cluster:

        def timed(parallel: bool) -> float:
            run_id = _recorded(cluster.journal, tools)
            start = time.perf_counter()
            report = cluster.unwind(run_id, **({"parallel": True} if parallel else {})).get(timeout=60)
            took = time.perf_counter() - start
            assert {e["status"] for e in report["entries"]} == {"compensated"}, report
            return took

        timed(True)  # the worker's pool children warm up (imports, connections)
        for _ in range(rounds):
            hooks.append(_one_hook(tools))
            side.append(timed(True))
            one.append(timed(False))
    _add_rows(table, "worker (redis+postgres, 5 processes)", hooks, side, one, 1.5)


def _add_rows(
    table: Table, where: str, hooks: list[float], side: list[float], one: list[float], target: float
) -> None:
    for label, times, goal in (("parallel=True", side, target), ("sequential (default)", one, None)):
        ratios = sorted(t / h for t, h in zip(times, hooks, strict=True))
        table.add(
            Row(
                f"{where}: {label}",
                statistics.median(times) * 1000,
                "ms per unwind",
                floor_name="one hook",
                floor=statistics.median(hooks) * 1000,
                ratio=statistics.median(ratios),
                target="" if goal is None else f"<= {goal}x",
                ok=None if goal is None else statistics.median(ratios) <= goal,
                note=f"per-round ratios {ratios[0]:.2f}x .. {ratios[-1]:.2f}x",
            )
        )


def run(cfg: Config) -> list[Table]:
    rounds = 5 if cfg.quick else 11
    backends = cfg.only_backends or ("memory", "sqlite")
    table = Table(
        f"Parallel unwind groups: {STEPS} steps in one group, {HOOK_S * 1000:.0f} ms hooks",
        caption=f"{rounds} rounds; the floor is one hook called directly in the same round; ratio = median "
        "of per-round (unwind time / hook time)",
    )
    with tempfile.TemporaryDirectory() as home:
        urls = {"memory": "memory://", "sqlite": f"sqlite:///{home}/bench-parallel.db"}
        for backend in backends:
            if backend not in urls:
                continue
            journal = open_journal(urls[backend], migrate=True)
            tools = _tools()
            try:
                hooks, side, one = [], [], []
                for _ in range(rounds):
                    hooks.append(_one_hook(tools))
                    side.append(_timed_unwind(journal, tools, parallel=True))
                    one.append(_timed_unwind(journal, tools, parallel=False))
            finally:
                journal.close()
            _add_rows(table, f"in process, {backend}", hooks, side, one, 1.3)
    if not cfg.only_backends or "postgres" in cfg.only_backends:
        _on_worker(cfg, rounds, table)
    return [table]
