"""Python function calls of a distributed unwind's tasks, counted (cProfile; deterministic).

On a shared 2-core machine a pool child's CPU moves with the load; the calls a task makes do not.
Two levels, each over ``--runs`` five-step no-op unwinds (after a few to warm the caches), in this
one process, against a fresh PostgreSQL database and the Redis step lock (``bench.common``'s
loopback servers), with no broker and no worker:

``executor``: ``executor.start_unwind`` (the coordinator), ``executor.run_step`` with the Redis
step lock (each step task) and ``executor.finalize_unwind`` as the last step task calls it, as
``bench.step_trips`` drives them.

``task``: the bodies of ``saga.compensate_run`` and ``saga.compensate_step`` themselves (celery/tasks.py:
the withdrawal read, the delivery count, the worker context, the next message's signature and its
``apply_async`` on kombu's in-memory transport, what the task shows, the report stored under the
coordinator's id in the Redis result backend), each called with its request pushed as a worker's
tracer pushes it. Celery's tracer and the pool around a body are not counted: they are the bare
tasks' too.

    python -m bench.step_calls [--runs 40] [--level executor|task|both] [--top 0]

Printed: calls per coordinator task, per step task (the mean of the five) and per report (the last
step's ``finalize_unwind``; counted in its step at the ``task`` level).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

STEPS = 5
WARM = 5


class Counts:
    """One profiler per phase (coordinator, step, report): calls and the functions that make them."""

    def __init__(self) -> None:
        self.profiles: dict[str, cProfile.Profile] = {}
        self.units: dict[str, int] = {}

    @contextmanager
    def phase(self, name: str, counted: bool) -> Iterator[None]:
        if not counted:
            yield
            return
        profile = self.profiles.setdefault(name, cProfile.Profile())
        self.units[name] = self.units.get(name, 0) + 1
        profile.enable()
        try:
            yield
        finally:
            profile.disable()

    def show(self, level: str, top: int) -> None:
        for name, profile in self.profiles.items():
            stats = pstats.Stats(profile, stream=sys.stdout)
            n = self.units[name]
            print(
                f"{level} {name}: {stats.total_calls / n:.1f} calls per task "  # type: ignore[attr-defined]
                f"({stats.prim_calls / n:.1f} primitive; {n} tasks)"  # type: ignore[attr-defined]
            )
            if top:
                stats.sort_stats("ncalls").print_stats(top)


def _executor_level(runs: int, counts: Counts) -> None:
    from bench.common import REDIS_URL, Backend, new_id
    from bench.seed import noop_tools, seed
    from saga_worker import executor
    from saga_worker.locks.redis import RedisStepLock

    tools = noop_tools()
    lock = RedisStepLock.from_url(REDIS_URL)
    with Backend("postgres") as backend:
        assert backend.engine is not None
        ids = [new_id("calls") for _ in range(runs + WARM)]
        seed(backend.engine, ids, STEPS)
        for i, run_id in enumerate(ids):
            on = i >= WARM
            unwind_id = new_id("unwind")
            with counts.phase("coordinator", on):
                nxt = executor.start_unwind(backend.journal, run_id, unwind_id, dry_run=False, claim_ttl=30.0)
            while isinstance(nxt, executor.Step):
                with counts.phase("step", on):
                    got = executor.run_step(
                        backend.journal, tools, run_id, unwind_id, nxt.suffix, claim_ttl=30.0, lock=lock
                    )
                assert got is not None
                nxt = got
            assert isinstance(nxt, executor.Finalize), nxt
            with counts.phase("report", on):
                report = executor.finalize_unwind(
                    backend.journal, run_id, unwind_id, info=nxt.info, ended=nxt.report
                )
            assert report.complete and len(report.entries) == STEPS, report


def _task_level(runs: int, counts: Counts) -> None:
    from celery import Celery
    from celery._state import _set_task_join_will_block

    from bench.common import REDIS_URL, Backend, new_id
    from bench.seed import noop_tools, seed
    from saga_worker import executor
    from saga_worker.celery import install
    from saga_worker.celery.tasks import COMPENSATE_RUN, COMPENSATE_STEP
    from saga_worker.settings import SagaSettings

    with Backend("postgres") as backend:
        assert backend.engine is not None
        settings = SagaSettings(journal_url=backend.url, redis_url=REDIS_URL, queue="saga-bench-calls")
        app = Celery("saga_bench_calls", broker="memory://", backend=REDIS_URL, set_as_current=False)
        install(app, settings=settings, tools=noop_tools(), beat=False)
        executor.reset()
        coordinator, step = app.tasks[COMPENSATE_RUN], app.tasks[COMPENSATE_STEP]
        ids = [new_id("calls") for _ in range(runs + WARM)]
        seed(backend.engine, ids, STEPS)
        with app.connection_for_write() as conn:
            channel = conn.default_channel

            def sent() -> tuple[str, list[Any]] | None:
                message = channel.basic_get(settings.queue, no_ack=True)
                if message is None:
                    return None
                body = json.loads(message.body)
                return str(message.headers["id"]), list(body[0])

            def call(task: Any, task_id: str, args: list[Any]) -> Any:
                _set_task_join_will_block(True)  # as in a pool child: no result subscribed to per message
                task.push_request(
                    id=task_id,
                    args=args,
                    kwargs={},
                    delivery_info={"redelivered": False, "routing_key": settings.queue},
                    is_eager=False,
                    called_directly=False,
                )
                try:
                    return task.run(*args)
                finally:
                    task.pop_request()
                    _set_task_join_will_block(False)

            try:
                for i, run_id in enumerate(ids):
                    on = i >= WARM
                    unwind_id = new_id("unwind")
                    with counts.phase("coordinator", on):
                        call(coordinator, unwind_id, [run_id])
                    steps = 0
                    while (message := sent()) is not None:
                        with counts.phase("step", on):
                            call(step, *message)
                        steps += 1
                    assert steps == STEPS, steps
                    report = app.AsyncResult(unwind_id).get(timeout=5)
                    statuses = [e["status"] for e in report["entries"]]
                    assert statuses == ["compensated"] * STEPS, report
            finally:
                executor.reset()


LEVELS: dict[str, Callable[[int, Counts], None]] = {"executor": _executor_level, "task": _task_level}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.step_calls", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--level", choices=("executor", "task", "both"), default="both")
    parser.add_argument("--top", type=int, default=0, help="also list the N functions called most")
    args = parser.parse_args(argv)
    for level in ("executor", "task") if args.level == "both" else (args.level,):
        counts = Counts()
        LEVELS[level](args.runs, counts)
        counts.show(level, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
