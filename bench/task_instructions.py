"""A worker's tasks of a distributed unwind against the contract's bare tasks, counted where the
machine's load cannot move the figure: instructions, bytes, the servers' CPU.

The drive (``Drive``) is a worker in this one process: each message of a 5-step unwind is taken off
the Redis broker and handed to the task's request class (what the worker's main process does: the
request built from the message, ``task_received``, the pool's accept and success callbacks) and to
``fast_trace_task`` (what a pool child does: the body decoded, Celery's tracer around the task, the
next message sent, the report stored in the Redis result backend), on a fresh PostgreSQL journal.
``saga`` sends ``saga.compensate_run``, ``bare`` the contract's bare tasks (``bench.noop_tasks``),
both on saga-worker's app, as the ``distributed`` group's worker runs them.

Three measures, each saga against bare, per 5-step unwind:

``instructions`` (default): user-space instructions of the pool child's part (``--part child``) or
the main process's (``--part main``), under ``valgrind --tool=callgrind``, collected only inside the
counted part (``operator.call`` around it, callgrind's ``--toggle-collect``); the difference of a
``--many``-unwind and a ``--few``-unwind process, so startup and seeding cancel out. Broken down by
shared object (the interpreter, psycopg's C module, libpq, libc, ``_json``, pydantic's core, ...)
and by C function (``--top``). The Python above them is ``bench.step_calls``'s to count.

``sizes``: what the counted part sends: the broker's messages (body and headers), PostgreSQL
statements (count, bytes of text, parameters and their bytes as text), Redis commands and bytes.

``server``: CPU the PostgreSQL backends of the journal's database and a ``redis-server`` of this
script's own (broker, results and step locks; port ``--redis-port``) spend per unwind, read from
``/proc/<pid>/schedstat`` around alternating rounds of each kind.

    python -m bench.task_instructions [--measure instructions|sizes|server|all] [--part child|main]
        [--few 10] [--many 40] [--top 25]

Needs valgrind (``apt-get install valgrind``) for ``instructions``; a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import operator
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

STEPS = 5
WARM = 5
KINDS = ("saga", "bare")
HOST = "bench@task-instructions"
TOGGLE = "_operator_call"  # libpython's C function behind operator.call: the counted part runs inside it

Counted = Callable[[Callable[[], Any]], Any]


def _plain(work: Callable[[], Any]) -> Any:
    return work()


class _Pool:
    """The prefork pool's ``apply_async`` as the request calls it: kept, to be run by the drive."""

    def __init__(self) -> None:
        self.sent: tuple[Any, ...] | None = None

    def apply_async(self, target: Any, args: Any, accept_callback: Any, callback: Any, **_: Any) -> None:
        self.sent = (target, args, accept_callback, callback)


class Drive:
    """A worker in this process, on a fresh PostgreSQL journal with ``seeded`` 5-step runs."""

    def __init__(self, seeded: int, redis_url: str) -> None:
        from bench.common import QUEUE_PREFIX, PgDatabase, new_id

        self._pg = PgDatabase()
        self._home = tempfile.TemporaryDirectory(prefix="saga-bench-ir-")
        self.queue = f"{QUEUE_PREFIX}-ir-{uuid.uuid4().hex[:6]}"
        os.environ.update(
            SAGA_HOME=self._home.name,
            SAGA_QUEUE=self.queue,
            SAGA_TOOLS="bench.seed:noop_tools",
            SAGA_JOURNAL_URL=self._pg.url,
            SAGA_BROKER_URL=redis_url,
            SAGA_RESULT_BACKEND=redis_url,
            SAGA_REDIS_URL=redis_url,
        )
        from celery.app import trace
        from celery.worker.request import create_request_cls
        from celery.worker.strategy import symbol_by_name  # type: ignore[attr-defined]

        import bench.noop_tasks  # noqa: F401  (the bare tasks, on the same app)
        from bench.seed import seed
        from saga_worker import open_journal
        from saga_worker.celery import default_app
        from saga_worker.celery.result_text import speed_up_result_text

        journal = open_journal(self._pg.url, migrate=True)
        self.run_ids = [new_id("ir") for _ in range(seeded)]
        seed(getattr(journal, "engine"), self.run_ids, STEPS)  # noqa: B009
        journal.close()
        self.app = app = default_app()
        trace.setup_worker_optimizations(app, HOST)  # as the worker and each pool child do
        for name, task in app.tasks.items():
            task.__trace__ = trace.build_tracer(name, task, app.loader, HOST, app=app)
        speed_up_result_text()  # the worker's worker_init does it (worker_signals)
        self._pool = _Pool()
        self._requests = {
            name: create_request_cls(symbol_by_name(task.Request), task, self._pool, HOST, None, app=app)
            for name, task in app.tasks.items()
        }
        self._conn = app.connection_for_write()
        self._channel: Any = self._conn.default_channel
        self.messages: list[Any] = []  # what was delivered, when ``keep`` is set
        self.keep = False

    def unwind(self, kind: str, run_id: str, child: Counted = _plain, main: Counted = _plain) -> None:
        """One unwind of ``kind``, every task delivered here; ``child`` and ``main`` run the pool
        child's and the main process's parts of each task."""
        from bench.common import new_id

        name = "saga.compensate_run" if kind == "saga" else "bench.contract_start"
        unwind_id = new_id("unwind")
        self.app.send_task(name, args=[run_id], task_id=unwind_id, queue=self.queue)
        tasks = 0
        while (message := self._channel.basic_get(self.queue, no_ack=True)) is not None:
            if self.keep:
                self.messages.append(message)
            self._deliver(message, child, main)
            tasks += 1
        assert tasks == STEPS + 1, tasks
        report = self.app.AsyncResult(unwind_id).get(timeout=10)
        assert [e["status"] for e in report["entries"]] == ["compensated"] * STEPS, report

    def _deliver(self, message: Any, child: Counted, main: Counted) -> None:
        """One message, as the worker's main process and a pool child handle it."""
        from celery import _state

        task = self.app.tasks[message.headers["task"]]
        req = main(functools.partial(self._received, message, task))
        main(functools.partial(req.execute_using_pool, self._pool))
        assert self._pool.sent is not None
        target, args, accepted, succeeded = self._pool.sent
        main(functools.partial(accepted, os.getpid(), time.monotonic()))
        block = getattr(_state, "_set_task_join_will_block")  # noqa: B009  (private, untyped)
        block(True)  # a pool child's: no result subscribed to per message
        try:
            result = child(functools.partial(target, *args))
        finally:
            block(False)
        main(functools.partial(succeeded, result))

    def _received(self, message: Any, task: Any) -> Any:
        from celery import signals

        req = self._requests[task.name](
            message,
            on_ack=_ack,
            on_reject=_ack,
            app=self.app,
            hostname=HOST,
            eventer=None,
            task=task,
            connection_errors=(),
            body=message.body,
            headers=message.headers,
            decoded=False,
            utc=True,
        )
        signals.task_received.send(sender=None, request=req)
        return req

    def backend_pids(self) -> list[int]:
        """The PostgreSQL server processes serving the journal's database."""
        import sqlalchemy as sa

        from bench.common import PG_ADMIN_URL

        engine = sa.create_engine(PG_ADMIN_URL)
        try:
            with engine.connect() as conn:
                rows = conn.execute(
                    sa.text("SELECT pid FROM pg_stat_activity WHERE datname = :db"), {"db": self._pg.name}
                )
                return [int(r[0]) for r in rows]
        finally:
            engine.dispose()

    def close(self) -> None:
        from saga_worker import executor

        self._conn.release()
        executor.reset()
        self._pg.drop()
        self._home.cleanup()


def _ack(*_: Any, **__: Any) -> None:
    return None


# -- instructions ------------------------------------------------------------------------------------


def _child(kind: str, part: str, runs: int, seeded: int, redis_url: str) -> None:
    drive = Drive(WARM + seeded, redis_url)  # seeded alike whatever ``runs``: the seeding cancels out
    # The cyclic GC off: it runs where allocation counts happen to cross its thresholds, and one full
    # collection (~50 M instructions) in either process moved a count by 15%. On a worker it ran 10
    # times in 2,100 tasks (bench/history/2026-12-07-issue-45.md, "Where a pool child's CPU goes").
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        counted: Counted = operator.call  # type: ignore[attr-defined]  # 3.11+
        for i, run_id in enumerate(drive.run_ids[: WARM + runs]):
            on = i >= WARM
            drive.unwind(
                kind,
                run_id,
                child=counted if on and part == "child" else _plain,
                main=counted if on and part == "main" else _plain,
            )
    finally:
        drive.close()


_LINE = re.compile(r"^\s*([\d,]+)\s+\([\s\d.]+%\)\s+(.*?)\s*$")


def _callgrind(
    kind: str, part: str, runs: int, seeded: int, redis_url: str, keep: str | None = None
) -> dict[str, int]:
    """Self instructions by ``function [object]`` (and ``TOTAL``) of one counted process; its
    callgrind file kept in ``keep`` (for ``callgrind_annotate --inclusive=yes``) if given."""
    with tempfile.TemporaryDirectory(prefix="saga-bench-cg-") as tmp:
        out = Path(keep or tmp) / f"callgrind.{kind}.{part}.{runs}"
        env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONMALLOC": "malloc"}
        command = [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            f"--toggle-collect={TOGGLE}",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            "bench.task_instructions",
            "--child",
            kind,
            "--part",
            part,
            "--runs",
            str(runs),
            "--seeded",
            str(seeded),
            "--redis-url",
            redis_url,
        ]
        subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        annotated = subprocess.run(
            ["callgrind_annotate", "--threshold=100", "--inclusive=no", str(out)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    counts: dict[str, int] = {}
    for line in annotated.splitlines():
        found = _LINE.match(line)
        if found is None:
            continue
        value, where = int(found.group(1).replace(",", "")), found.group(2)
        if "PROGRAM TOTALS" in where:
            counts["TOTAL"] = value
        elif ":" in where or "[" in where:
            counts[where] = counts.get(where, 0) + value
    return counts


def _object(where: str) -> str:
    found = re.search(r"\[(.*)\]\s*$", where)
    if found is None:
        return "?"
    name = Path(found.group(1)).name
    for short in ("libpython", "libc.so", "libpq", "libssl", "libcrypto", "libm.so", "ld-linux"):
        if name.startswith(short):
            return short.rstrip(".")
    return re.sub(r"\.cpython-\d+.*\.so$", ".so", name)


def _function(where: str) -> str:
    text = re.sub(r"\s*\[.*\]\s*$", "", where)
    return text.rsplit(":", 1)[-1] + f" ({_object(where)})"


def instructions(
    part: str,
    few: int,
    many: int,
    top: int,
    redis_url: str,
    keep: str | None = None,
    kinds: tuple[str, ...] = KINDS,
) -> None:
    if shutil.which("valgrind") is None:
        sys.exit("bench.task_instructions needs valgrind (apt-get install valgrind)")
    per: dict[str, dict[str, float]] = {}
    for kind in kinds:
        low = _callgrind(kind, part, few, many, redis_url, keep)
        high = _callgrind(kind, part, many, many, redis_url, keep)
        per[kind] = {k: (high.get(k, 0) - low.get(k, 0)) / (many - few) for k in set(low) | set(high)}
    if len(kinds) == 1:  # a lever's before and after: one kind alone
        (kind,) = kinds
        print(f"{part} part, {kind}: {per[kind]['TOTAL'] / 1e6:.3f} M instructions per {STEPS}-step unwind")
        return
    saga, bare = per["saga"], per["bare"]
    print(
        f"{part} part, instructions per {STEPS}-step unwind ({many} unwinds' process minus {few}'s): "
        f"saga {saga['TOTAL'] / 1e6:.2f} M, bare {bare['TOTAL'] / 1e6:.2f} M, "
        f"ratio {saga['TOTAL'] / bare['TOTAL']:.3f}"
    )
    by_object: dict[str, dict[str, float]] = {kind: defaultdict(float) for kind in KINDS}
    by_function: dict[str, dict[str, float]] = {kind: defaultdict(float) for kind in KINDS}
    for kind in KINDS:
        for where, value in per[kind].items():
            if where != "TOTAL":
                by_object[kind][_object(where)] += value
                by_function[kind][_function(where)] += value
    _table("shared object", by_object, top=0)
    _table("C function (self)", by_function, top=top)


def _table(title: str, by: dict[str, dict[str, float]], *, top: int) -> None:
    keys = set(by["saga"]) | set(by["bare"])
    rows = sorted(keys, key=lambda k: -abs(by["saga"].get(k, 0.0) - by["bare"].get(k, 0.0)))
    if top:
        rows = rows[:top]
    width = max([len(title), *(len(k) for k in rows)])
    print(f"\n{title:<{width}}  {'saga k':>9}  {'bare k':>9}  {'diff k':>9}")
    for key in rows:
        s, b = by["saga"].get(key, 0.0), by["bare"].get(key, 0.0)
        if abs(s) < 500 and abs(b) < 500:
            continue
        print(f"{key:<{width}}  {s / 1e3:>9,.0f}  {b / 1e3:>9,.0f}  {(s - b) / 1e3:>+9,.0f}")


# -- sizes -------------------------------------------------------------------------------------------


class _Tally:
    def __init__(self) -> None:
        self.on = False
        self.counts: Counter[str] = Counter()

    def add(self, **values: int) -> None:
        if self.on:
            self.counts.update(values)

    def counted(self, work: Callable[[], Any]) -> Any:
        self.on = True
        try:
            return work()
        finally:
            self.on = False


@contextlib.contextmanager
def _tallied(tally: _Tally) -> Iterator[None]:
    """psycopg's ``Cursor.execute`` and redis-py's ``send_packed_command``, tallied while counting."""
    import psycopg
    import redis.connection

    execute, send = psycopg.Cursor.execute, redis.connection.AbstractConnection.send_packed_command

    def counted_execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        text = query if isinstance(query, (str, bytes)) else str(query)
        values = list(params.values() if isinstance(params, dict) else params or ())
        tally.add(
            statements=1,
            statement_bytes=len(text.encode() if isinstance(text, str) else text),
            parameters=len(values),
            parameter_bytes=sum(len(v if isinstance(v, (str, bytes)) else str(v)) for v in values),
        )
        return execute(self, query, params, **kwargs)

    def counted_send(self: Any, command: Any, check_health: bool = True) -> None:
        chunks = [command] if isinstance(command, (bytes, str)) else command
        tally.add(redis_writes=1, redis_bytes=sum(len(c) for c in chunks))
        send(self, command, check_health)

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
    redis.connection.AbstractConnection.send_packed_command = counted_send  # type: ignore[method-assign]
    try:
        yield
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        redis.connection.AbstractConnection.send_packed_command = send  # type: ignore[method-assign]


def sizes(runs: int, redis_url: str) -> None:
    drive = Drive(2 * (WARM + runs), redis_url)
    out: dict[str, Counter[str]] = {}
    try:
        ids = iter(drive.run_ids)
        for kind in KINDS:
            tally = _Tally()
            with _tallied(tally):
                for i in range(WARM + runs):
                    drive.keep = i >= WARM
                    drive.unwind(kind, next(ids), child=tally.counted if i >= WARM else _plain)
            for message in drive.messages:
                headers = json.dumps(message.headers, ensure_ascii=False).encode()
                tally.counts.update(
                    messages=1, message_body_bytes=len(message.body), message_header_bytes=len(headers)
                )
            drive.messages.clear()
            out[kind] = tally.counts
    finally:
        drive.close()
    print(f"pool child's part, per {STEPS}-step unwind ({runs} unwinds of each)")
    print(f"{'':<22}  {'saga':>9}  {'bare':>9}")
    for key in sorted(set(out["saga"]) | set(out["bare"])):
        print(f"{key:<22}  {out['saga'][key] / runs:>9,.1f}  {out['bare'][key] / runs:>9,.1f}")


# -- server ------------------------------------------------------------------------------------------


def _on_cpu(pids: list[int]) -> float:
    """Seconds on a CPU so far of every thread of ``pids`` (``schedstat``: nanoseconds)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


@contextlib.contextmanager
def _own_redis(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A ``redis-server`` of this script's own, so its CPU is this drive's alone."""
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.1):
                break
            time.sleep(0.05)
        yield server
    finally:
        server.terminate()
        server.wait()


def server(runs: int, rounds: int, port: int) -> None:
    with _own_redis(port) as redis_server:
        drive = Drive(2 * rounds * runs + 2 * WARM, f"redis://127.0.0.1:{port}/0")
        ids = iter(drive.run_ids)
        used: dict[str, dict[str, list[float]]] = {k: {"postgres": [], "redis": []} for k in KINDS}
        try:
            for kind in KINDS:
                for _ in range(WARM):
                    drive.unwind(kind, next(ids))
            backends = drive.backend_pids()
            for _ in range(rounds):
                for kind in KINDS:
                    pg0, rd0 = _on_cpu(backends), _on_cpu([redis_server.pid])
                    for _ in range(runs):
                        drive.unwind(kind, next(ids))
                    used[kind]["postgres"].append((_on_cpu(backends) - pg0) / runs * 1e3)
                    used[kind]["redis"].append((_on_cpu([redis_server.pid]) - rd0) / runs * 1e3)
        finally:
            drive.close()
    print(
        f"server CPU per {STEPS}-step unwind, ms (medians of {rounds} alternating rounds of {runs}; "
        f"PostgreSQL: the journal database's {len(backends)} backends; Redis: a server of its own)"
    )
    for name in ("postgres", "redis"):
        s, b = statistics.median(used["saga"][name]), statistics.median(used["bare"][name])
        print(f"{name:<9} saga {s:.3f}  bare {b:.3f}  ratio {s / b:.2f}")


def main(argv: list[str] | None = None) -> int:
    from bench.common import REDIS_URL

    parser = argparse.ArgumentParser(
        prog="python -m bench.task_instructions", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--measure", choices=("instructions", "sizes", "server", "all"), default="instructions"
    )
    parser.add_argument("--part", choices=("child", "main"), default="child")
    parser.add_argument("--few", type=int, default=10)
    parser.add_argument("--many", type=int, default=40)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--keep", help="instructions: keep the callgrind files in this folder")
    parser.add_argument(
        "--kind", choices=KINDS, help="instructions: this kind alone (a lever's before and after)"
    )
    parser.add_argument("--rounds", type=int, default=7, help="server: alternating rounds of --many unwinds")
    parser.add_argument("--redis-port", type=int, default=6391, help="server: the redis-server of its own")
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--seeded", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", default=REDIS_URL, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        _child(args.child, args.part, args.runs, args.seeded, args.redis_url)
        return 0
    if args.measure in ("instructions", "all"):
        kinds = KINDS if args.kind is None else (args.kind,)
        instructions(args.part, args.few, args.many, args.top, args.redis_url, args.keep, kinds)
    if args.measure in ("sizes", "all"):
        sizes(args.many, args.redis_url)
    if args.measure in ("server", "all"):
        server(args.many, args.rounds, args.redis_port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
