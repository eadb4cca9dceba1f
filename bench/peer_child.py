"""One peer's unwinds, run inside the bench's own peer environment (bench/.peers, never the product's).

``bench/.peers/bin/python bench/peer_child.py PEER BACKEND DIR [PG_URL]`` sets the peer up once, then
reads a number of runs per line on stdin and answers each with one JSON line: the compensations that
round ran, the seconds they took, and the CPU seconds of this process meanwhile (all its threads). The parent (bench/peers.py) alternates these rounds with its own.

Each run executes 5 no-op side-effecting steps with the peer's durable store, then unwinds them; only
the unwind is timed (from the last forward step's return to the unwind's end, its durable writes
included), as saga-worker's ``compensate_run`` of a recorded run is.

- agent-saga 2.3.11: a ``SagaContext`` on its ``FileWAL`` (JSON lines, ``os.fsync`` at each barrier),
  5 ``COMPENSABLE`` steps each with a ``Compensation``; timed: ``rollback()`` + ``finish(aborted=True)``.
- dbos 3.4.0: a ``@DBOS.workflow`` of 5 ``@DBOS.step`` forward calls, then 5 compensating
  ``@DBOS.step`` calls in reverse (DBOS's saga pattern); timed: the compensating steps and the
  workflow's completion, on its SQLite system database (DBOS's defaults) or on PostgreSQL.

This file imports nothing of saga-worker and is excluded from the product's type check.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

STEPS = 5


def _agent_saga(directory: str):  # type: ignore[no-untyped-def]
    from agent_saga.context import SagaContext
    from agent_saga.semantics import ActionSemantics, Compensation
    from agent_saga.wal.file_wal import FileWAL

    loop = asyncio.new_event_loop()
    wal = FileWAL(f"{directory}/agent-saga.wal")
    loop.run_until_complete(wal.start())

    def noop(**_kwargs: object) -> None:
        return None

    def compensation(result: object) -> Compensation:
        return Compensation(fn=noop, kwargs={"ref": result}, handler="noop")

    async def one_run() -> float:
        ctx = SagaContext(wal=wal, compensation_retry_delay=0.0)
        await ctx.begin()
        for i in range(STEPS):
            await ctx.execute(
                tool=f"step{i}",
                semantics=ActionSemantics.COMPENSABLE,
                forward=lambda i=i: i,
                compensate=compensation,
            )
        start, cpu = time.perf_counter(), time.process_time()
        report = await ctx.rollback()
        await ctx.finish(aborted=True, clean=report.clean)
        took = time.perf_counter() - start, time.process_time() - cpu
        assert report.clean and len(report.compensated) == STEPS, report.summary()
        return took

    def rounds(runs: int) -> tuple[int, float, float]:
        took = [loop.run_until_complete(one_run()) for _ in range(runs)]
        return runs * STEPS, sum(t for t, _ in took), sum(c for _, c in took)

    return rounds


def _dbos(directory: str, backend: str, pg_url: str):  # type: ignore[no-untyped-def]
    import logging

    from dbos import DBOS

    url = f"sqlite:///{directory}/dbos.sqlite" if backend == "sqlite" else pg_url
    DBOS(config={"name": "saga-bench-peer", "system_database_url": url, "log_level": "WARNING"})
    logging.getLogger("dbos").setLevel(logging.WARNING)

    done: list[int] = []

    @DBOS.step()
    def forward(i: int) -> int:
        return i

    @DBOS.step()
    def compensate(i: int) -> None:
        done.append(i)

    @DBOS.workflow()
    def workflow(n: int) -> tuple[float, float]:
        for i in range(n):
            forward(i)
        started = time.perf_counter(), time.process_time()
        for i in reversed(range(n)):
            compensate(i)
        return started

    DBOS.launch()

    def rounds(runs: int) -> tuple[int, float, float]:
        total = cpu = 0.0
        for _ in range(runs):
            before = len(done)
            started, cpu_started = workflow(STEPS)
            total += time.perf_counter() - started
            cpu += time.process_time() - cpu_started
            assert len(done) - before == STEPS
        return runs * STEPS, total, cpu

    return rounds


def main() -> int:
    peer, backend, directory = sys.argv[1], sys.argv[2], sys.argv[3]
    pg_url = sys.argv[4] if len(sys.argv) > 4 else ""
    if peer == "agent-saga":
        rounds = _agent_saga(directory)
    elif peer == "dbos":
        rounds = _dbos(directory, backend, pg_url)
    else:
        raise SystemExit(f"unknown peer {peer}")
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        runs = int(line)
        compensations, seconds, cpu = rounds(runs)
        print(json.dumps({"compensations": compensations, "seconds": seconds, "cpu": cpu}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
