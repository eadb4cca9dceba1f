"""Redis commands per 5-step unwind and per no-op task, counted with MONITOR (not timed).

``python -m bench.redis_commands`` starts the distributed bench's saga worker (Redis + PostgreSQL)
and the plain Celery app's worker on a Redis database of their own (13 unless
``SAGA_BENCH_REDIS_URL`` says otherwise), unwinds 20 five-step runs one after another, then sends
20 no-op tasks to each worker, and prints the commands Redis saw for that database, by name, per
unwind or per task. MONITOR also lists the commands a Lua script runs (the step lock's GET, SET and
DEL), each EVALSHA being the one round trip. It slows Redis down: never run it next to a timed bench.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable

os.environ.setdefault("SAGA_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")

import redis  # noqa: E402

from bench.cluster import POLL, Cluster, PlainCelery  # noqa: E402
from bench.common import REDIS_URL, new_id  # noqa: E402
from bench.seed import seed  # noqa: E402

COUNT = 20
DB = REDIS_URL.rsplit("/", 1)[1]


def monitored(work: Callable[[], None], units: int) -> dict[str, float]:
    """Commands Redis ran for the bench's database while ``work`` ran, per unit of work."""
    counts: collections.Counter[str] = collections.Counter()
    stop, ready = threading.Event(), threading.Event()
    client = redis.Redis.from_url(REDIS_URL)

    def watch() -> None:
        with client.monitor() as monitor:
            ready.set()
            for command in monitor.listen():
                if stop.is_set():
                    break
                if str(command.get("db")) == DB:
                    counts[command["command"].split(" ", 1)[0].upper()] += 1

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    ready.wait()
    time.sleep(0.3)
    work()
    time.sleep(1.0)  # the last acks and result expiries
    stop.set()
    client.ping()  # one more command, so the listener wakes up and sees stop
    thread.join(5)
    return {name: n / units for name, n in counts.most_common()}


def show(label: str, per: dict[str, float]) -> None:
    detail = ", ".join(f"{name} {n:.1f}" for name, n in per.items() if n >= 0.5)
    print(f"{label}: {sum(per.values()):.1f} commands ({detail})")


def main() -> None:
    with Cluster("redis+postgres") as cluster:
        assert cluster.engine is not None
        ids = [new_id("cnt") for _ in range(COUNT + 5)]
        seed(cluster.engine, ids, 5)
        for run_id in ids[:5]:  # warm both pool processes
            cluster.unwind(run_id).get(timeout=60, interval=POLL)

        def unwinds() -> None:
            for run_id in ids[5:]:
                cluster.unwind(run_id).get(timeout=60, interval=POLL)

        show("per 5-step unwind (6 tasks)", monitored(unwinds, COUNT))

        def noops() -> None:
            for _ in range(COUNT):
                cluster.noop().get(timeout=60, interval=POLL)

        show("per no-op task, saga worker's settings", monitored(noops, COUNT))
        with PlainCelery() as plain:
            for _ in range(5):
                plain.noop().get(timeout=60, interval=POLL)

            def plain_noops() -> None:
                for _ in range(COUNT):
                    plain.noop().get(timeout=60, interval=POLL)

            show("per no-op task, plain Celery app, default settings", monitored(plain_noops, COUNT))


if __name__ == "__main__":
    main()
