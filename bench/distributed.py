"""Distributed figures: ``saga.compensate_run`` through a 2-process prefork worker, against Celery's
own no-op task on that same worker.

- Latency: ``compensate_run.delay(run_id).get()`` for a 5-step run (coordinator + 5 step tasks, the
  last of which assembles the report = 6 tasks) against a chain of 7 no-op tasks (issue 6's floor:
  an unwind used to need a finalize task too), one of each in turn.
- Throughput: a round of 5-step unwinds all sent at once, against a round of as many no-op tasks
  as the unwinds have steps, in alternating rounds. Issue 6's target compares compensated steps/s
  with no-op tasks/s; the note also gives the per-task view (6 tasks per 5 steps).
- On Redis + PostgreSQL, the contract's own floor: the same unwind done by **the contract's bare
  tasks** (``bench.contract_start`` and ``bench.contract_step`` in ``bench.noop_tasks``: the
  coordinator, then one task per step, each doing the statements and lock calls the contract requires
  and nothing else, and sending the next as ``saga.compensate_run``'s tasks do), on the same worker,
  timed in the same rounds on runs seeded alike: what any implementation of the contract takes on
  this worker, and so the ceiling of the 1.3x and 0.6 targets measured against the no-op tasks.
- On Redis, a second floor (issue 16): the same no-op on a plain Celery app with Celery's default
  settings (``bench.noop_app``, a worker of its own on the same broker), measured in the same
  rounds: what Celery costs an app that asks nothing of it.
- On Redis + PostgreSQL, the CPU each of those takes, by process (``bench.cpu_by_process``): on two
  cores a sequential unwind is bound by the CPU every process of the cluster shares.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.cluster import POLL, SETUPS, Cluster, PlainCelery
from bench.common import Row, Table, cost_ratio, interleaved, new_id, percentile
from bench.config import Config
from bench.cpu_by_process import cpu_rows
from bench.seed import seed

STEPS = 5
TASKS_PER_UNWIND = STEPS + 1  # the coordinator, then one task per step
CHAIN_FLOOR = 7  # issue 6: the latency floor is a chain of 7 no-op tasks
DURABLE_PER_UNWIND = 1  # PostgreSQL commits an unwind waits to be flushed: the tombstone


def _check(report: dict[str, object]) -> None:
    entries = report["entries"]
    assert isinstance(entries, list) and len(entries) == STEPS, report
    assert all(e["status"] == "compensated" for e in entries), report


class DurableCommits:
    """The contract's own floor on PostgreSQL: what one durable commit costs here (a bare one-row
    INSERT+COMMIT on its own connection, ``synchronous_commit`` as the server has it), timed in the
    same rounds. An unwind waits for ``DURABLE_PER_UNWIND`` of them: the tombstone, before the first
    hook (the journal's other commits do not wait for the WAL flush: tests/journal/test_postgres_durability.py)."""

    def __init__(self, engine: Any) -> None:
        self.raw = engine.raw_connection()
        self.cur = self.raw.cursor()
        self.cur.execute("SET synchronous_commit TO DEFAULT")  # the journal's engine sets it off
        self.cur.execute("CREATE TABLE IF NOT EXISTS bench_commit_floor (k BIGINT PRIMARY KEY)")
        self.raw.commit()
        self.counter = iter(range(10**9))
        self.commits: list[float] = []

    def commit(self) -> None:
        start = time.perf_counter()
        self.cur.execute("INSERT INTO bench_commit_floor VALUES (%s)", (next(self.counter),))
        self.raw.commit()
        self.commits.append(time.perf_counter() - start)

    def close(self) -> None:
        self.cur.close()
        self.raw.close()


def latency_rows(cluster: Cluster, cfg: Config, plain: PlainCelery | None = None) -> list[Row]:
    assert cluster.engine is not None
    durable = DurableCommits(cluster.engine) if cluster.setup == "redis+postgres" else None
    samples = (
        cfg.latency_samples
        if cluster.setup != "embedded"
        else max(10, int(cfg.latency_samples * cfg.embedded_share))
    )
    ids = [new_id("lat") for _ in range(samples + 5)]
    bare = cluster.setup == "redis+postgres"
    bare_ids = [new_id("bare") for _ in ids] if bare else []  # each run is unwound once only
    seed(cluster.engine, ids + bare_ids, STEPS)
    unwind_lat: list[float] = []
    bare_lat: list[float] = []
    chain_lat: list[float] = []
    plain_lat: list[float] = []
    first = 0.0
    for i, run_id in enumerate(ids):
        start = time.perf_counter()
        _check(cluster.unwind(run_id).get(timeout=120, interval=POLL))
        took = time.perf_counter() - start
        first = first or took
        if durable is not None:
            durable.commit()
        bare_took = 0.0
        if bare:
            start = time.perf_counter()
            _check(cluster.contract_unwind(bare_ids[i]).get(timeout=120, interval=POLL))
            bare_took = time.perf_counter() - start
        start = time.perf_counter()
        cluster.noop_chain(CHAIN_FLOOR).get(timeout=120, interval=POLL)
        chain_took = time.perf_counter() - start
        plain_took = 0.0
        if plain is not None:
            start = time.perf_counter()
            plain.noop_chain(CHAIN_FLOOR).get(timeout=120, interval=POLL)
            plain_took = time.perf_counter() - start
        if i >= 5:  # the first few warm the pool processes' connections
            unwind_lat.append(took)
            bare_lat.append(bare_took)
            chain_lat.append(chain_took)
            plain_lat.append(plain_took)
    p50, chain50 = statistics.median(unwind_lat), statistics.median(chain_lat)
    ratio = p50 / chain50
    p99 = percentile(unwind_lat, 99) * 1e3
    rows = [
        Row(
            f"{cluster.setup}: 5-step unwind latency p50",
            p50 * 1e3,
            "ms",
            "7 no-op task chain p50, same worker",
            chain50 * 1e3,
            ratio,
            "<= 1.5x",
            ratio <= 1.5,
            f"p99 {p99:.1f} ms vs chain p99 {percentile(chain_lat, 99) * 1e3:.1f} ms; "
            f"{samples} of each, interleaved",
        ),
    ]
    rows.append(
        Row(
            f"{cluster.setup}: the worker's first unwind",
            first * 1e3,
            "ms",
            "5-step unwind latency p50",
            p50 * 1e3,
            first / p50,
            "",
            None,
            "one sample: the first unwind after the worker started, in pool processes that had run no "
            "saga task (each opens the journal, its connections and the step lock on its first)",
        )
    )
    if durable is not None:
        flushes, commit50 = DURABLE_PER_UNWIND, statistics.median(durable.commits)
        durable.close()
        # An unwind's tasks at the no-op's cost, plus the commit it must wait to see flushed: the
        # least the contract lets any implementation on this worker and this server take.
        floor = chain50 * TASKS_PER_UNWIND / CHAIN_FLOOR + flushes * commit50
        rows.append(
            Row(
                f"{cluster.setup}: 5-step unwind latency p50 vs the contract's floor",
                p50 * 1e3,
                "ms",
                f"{TASKS_PER_UNWIND} no-op tasks + {flushes} durable commit",
                floor * 1e3,
                p50 / floor,
                "",
                None,
                f"{flushes} durable commit (the tombstone) per unwind, one (bare INSERT+COMMIT) "
                f"p50 {commit50 * 1e3:.2f} ms; against the 7-task chain this floor is "
                f"{floor / chain50:.2f}x",
            )
        )
    if bare:
        bare50 = statistics.median(bare_lat)
        rows.append(
            Row(
                f"{cluster.setup}: 5-step unwind latency p50 vs the contract's bare tasks",
                p50 * 1e3,
                "ms",
                f"the contract's bare tasks ({TASKS_PER_UNWIND}), same worker",
                bare50 * 1e3,
                p50 / bare50,
                "",
                None,
                f"the floor is {bare50 / chain50:.2f}x the 7-task chain (the 1.3x target's ceiling: "
                f"reachable only below 1.3x); floor p99 {percentile(bare_lat, 99) * 1e3:.1f} ms; "
                f"{samples} of each, interleaved",
            )
        )
    if plain is not None:
        plain50 = statistics.median(plain_lat)
        rows.append(
            Row(
                f"{cluster.setup}: 5-step unwind latency p50 vs plain Celery",
                p50 * 1e3,
                "ms",
                "7 no-op task chain p50, plain app, default settings",
                plain50 * 1e3,
                p50 / plain50,
                "<= 1.5x",
                p50 / plain50 <= 1.5,
                f"p99 {p99:.1f} ms vs chain p99 {percentile(plain_lat, 99) * 1e3:.1f} ms; "
                f"{samples} of each, interleaved",
            )
        )
    return rows


def throughput_rows(cluster: Cluster, cfg: Config, plain: PlainCelery | None = None) -> list[Row]:
    assert cluster.engine is not None
    rounds = cfg.rounds
    runs = cfg.dist_runs if cluster.setup != "embedded" else int(cfg.dist_runs * cfg.embedded_share)
    per_round = max(1, runs // rounds)
    work = [[new_id("thr") for _ in range(per_round)] for _ in range(rounds)]
    bare = cluster.setup == "redis+postgres"
    bare_work = [[new_id("bare") for _ in range(per_round)] for _ in range(rounds)] if bare else []
    seed(cluster.engine, [r for chunk in work + bare_work for r in chunk], STEPS)

    def unwinds(i: int) -> int:
        results = [cluster.unwind(run_id) for run_id in work[i]]
        for result in results:
            _check(result.get(timeout=300, interval=POLL))
        return per_round * STEPS

    def bare_unwinds(i: int) -> int:
        results = [cluster.contract_unwind(run_id) for run_id in bare_work[i]]
        for result in results:
            _check(result.get(timeout=300, interval=POLL))
        return per_round * STEPS

    def noops_on(target: Cluster | PlainCelery) -> Callable[[int], int]:
        def noops(_i: int) -> int:
            results = [target.noop() for _ in range(per_round * STEPS)]
            for result in results:
                result.get(timeout=300, interval=POLL)
            return per_round * STEPS

        return noops

    fns = {"unwind": unwinds, "same": noops_on(cluster)}
    if bare:
        fns["bare"] = bare_unwinds
    if plain is not None:
        fns["plain"] = noops_on(plain)
    got = interleaved(fns, rounds)
    rate = statistics.median(got["unwind"])
    same = cost_ratio(got["unwind"], got["same"])
    note = f"{per_round} runs x {rounds} rounds"
    # steps/s against no-op tasks/s: the target (>= 0.8x, i.e. cost ratio <= 1.25)
    rows = [
        Row(
            f"{cluster.setup}: compensated steps/s, 2 worker processes",
            rate,
            "steps/s",
            "no-op tasks/s, same worker",
            statistics.median(got["same"]),
            same,
            ">= 0.8x no-op (<= 1.25x)",
            same <= 1.25,
            f"{1 / same:.2f}x no-op tasks/s; {rate * TASKS_PER_UNWIND / STEPS:,.0f} saga tasks/s; {note}",
        )
    ]
    if bare:
        vs_bare = cost_ratio(got["unwind"], got["bare"])
        ceiling = cost_ratio(got["same"], got["bare"])  # per round: bare steps/s / no-op tasks/s
        rows.append(
            Row(
                f"{cluster.setup}: compensated steps/s vs the contract's bare tasks",
                rate,
                "steps/s",
                "the contract's bare tasks, steps/s, same worker",
                statistics.median(got["bare"]),
                vs_bare,
                "",
                None,
                f"{1 / vs_bare:.2f}x the floor's steps/s; the floor runs at {ceiling:.2f}x no-op tasks/s "
                f"(the >= 0.6 target's ceiling; {TASKS_PER_UNWIND} tasks per {STEPS} steps cap it at "
                f"{STEPS / TASKS_PER_UNWIND:.2f}); {note}",
            )
        )
    if plain is not None:
        vs_plain = cost_ratio(got["unwind"], got["plain"])
        rows.append(
            Row(
                f"{cluster.setup}: compensated steps/s vs plain Celery",
                rate,
                "steps/s",
                "no-op tasks/s, plain app, default settings",
                statistics.median(got["plain"]),
                vs_plain,
                ">= 0.5x no-op (<= 2.0x)",
                vs_plain <= 2.0,
                f"{1 / vs_plain:.2f}x plain no-op tasks/s; {note}",
            )
        )
    return rows


def run(cfg: Config) -> list[Table]:
    table = Table(
        "Distributed: saga.compensate_run on a 2-process prefork worker vs Celery no-op on the same worker"
        " and on a plain Celery app with default settings",
        caption="each figure and its floor measured alternately on the same worker",
    )
    for setup in SETUPS:
        if setup == "redis+postgres" and "postgres" not in cfg.backends(["postgres"]):
            continue
        if setup == "embedded" and "sqlite" not in cfg.backends(["sqlite"]):
            continue
        with Cluster(setup) as cluster:
            if setup == "embedded":
                table.rows.extend(latency_rows(cluster, cfg))
                table.rows.extend(throughput_rows(cluster, cfg))
                continue
            with PlainCelery() as plain:
                table.rows.extend(latency_rows(cluster, cfg, plain))
                table.rows.extend(throughput_rows(cluster, cfg, plain))
            table.rows.extend(cpu_rows(cluster, cfg))
    return [table]
