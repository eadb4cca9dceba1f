"""Scaling: the cost of a compensated step as runs get longer and as the journal fills up.

Both must stay flat per step: every read the unwind does is by primary key or by the
``(run_id, seq)`` index, never a scan. Each figure is paired with the bare writes of the same steps
(bench/bare.py) in alternating rounds; flatness is judged on that noise-cancelled cost ratio,
relative to the first column (10-step runs; the smallest journal).
"""

from __future__ import annotations

import statistics

from bench.bare import BareWriter
from bench.common import Backend, Paired, Row, Table, new_id, paired
from bench.config import Config
from bench.seed import noop_tools, record_run, seed
from saga_worker import compensate_run

FLAT = 1.5  # a per-step cost ratio more than 1.5x the reference one is not flat


def _unwind_pair(backend: Backend, length: int, runs: int, rounds: int) -> Paired:
    tools = noop_tools()
    rounds = max(1, min(rounds, runs))
    per_round = max(1, runs // rounds)
    work = [[new_id("s") for _ in range(per_round)] for _ in range(rounds)]
    floor_work = [[new_id("b") for _ in range(per_round)] for _ in range(rounds)]
    assert backend.engine is not None
    seed(backend.engine, [r for chunk in work + floor_work for r in chunk], length)
    bare = BareWriter(backend.engine)

    def unwind(i: int) -> int:
        for run_id in work[i]:
            report = compensate_run(run_id, journal=backend.journal, tools=tools)
            assert report.complete and len(report.entries) == length, report
        return per_round * length

    def floor(i: int) -> int:
        for run_id in floor_work[i]:
            bare.unwind(run_id, length)
        return per_round * length

    try:
        return paired(unwind, floor, rounds)
    finally:
        bare.close()


def _memory_rate(length: int, runs: int) -> float:
    import time

    tools = noop_tools()
    with Backend("memory") as backend:
        ids = [new_id("m") for _ in range(runs)]
        for run_id in ids:
            record_run(backend.journal, run_id, length, tools)
        start = time.perf_counter()
        for run_id in ids:
            compensate_run(run_id, journal=backend.journal, tools=tools)
        return runs * length / (time.perf_counter() - start)


def run_length(cfg: Config) -> Table:
    table = Table(
        "Scaling with run length: cost per compensated step (fresh journal per backend)",
        caption=f"flat = cost ratio within {FLAT}x of the median of the 10- to 1,000-step runs' (1-step runs "
        "carry the per-run tombstone and report alone)",
    )
    for kind in cfg.backends(("memory", "sqlite", "postgres")):
        if kind == "memory":
            for length in cfg.run_lengths:
                runs = max(1, cfg.steps_per_length // length)
                rate = _memory_rate(length, runs)
                table.add(
                    Row(f"memory: {length}-step runs", 1e6 / rate, "µs/step", note=f"{runs} runs; no floor")
                )
            continue
        with Backend(kind) as backend:
            rows = []
            for length in cfg.run_lengths:
                # at least one run per round: a round with one long run is one noisy sample
                runs = max(cfg.rounds, cfg.steps_per_length // length)
                got = _unwind_pair(backend, length, runs, cfg.rounds)
                rows.append(
                    Row(
                        f"{kind}: {length}-step runs",
                        1e6 / got.rate,
                        "µs/step",
                        "bare writes",
                        1e6 / got.floor_rate,
                        got.cost_ratio,
                        note=f"{runs} runs",
                    )
                )
            _judge([r for r, length in zip(rows, cfg.run_lengths, strict=True) if length >= 10])
            table.rows.extend(rows)
    for row in table.rows:
        if row.floor is not None:
            row.floor_name = "bare writes, µs/step"
    return table


def journal_size(cfg: Config) -> Table:
    table = Table(
        "Scaling with journal size: cost per compensated step of 5-step runs as the journal fills",
        caption=f"size = tool records already in the journal (all unwound earlier, with their claims, "
        f"decisions and runs); flat = cost ratio within {FLAT}x of the median over the sizes; every unwind read is an index search",
    )
    for kind in cfg.backends(("sqlite", "postgres")):
        with Backend(kind) as backend:
            assert backend.engine is not None
            have = 0
            rows = []
            for size in cfg.journal_sizes:
                seed(backend.engine, (new_id("old") for _ in range((size - have) // 5)), 5, compensated=True)
                have = size
                got = _unwind_pair(backend, 5, cfg.size_probe_runs, cfg.rounds)
                rows.append(
                    Row(
                        f"{kind}: {size:,} records",
                        1e6 / got.rate,
                        "µs/step",
                        "bare writes, µs/step",
                        1e6 / got.floor_rate,
                        got.cost_ratio,
                    )
                )
            _judge(rows)
            table.rows.extend(rows)
    return table


def _judge(rows: list[Row]) -> None:
    """Flat: every cost ratio within FLAT of the group's median one (a median, not the first point,
    so that one noisy round on a shared machine does not move the reference)."""
    ratios = [r.ratio for r in rows if r.ratio is not None]
    if not ratios:
        return
    middle = statistics.median(ratios)
    for row in rows:
        assert row.ratio is not None
        row.target = "flat"
        row.ok = row.ratio <= FLAT * middle
        row.note = "; ".join(x for x in (row.note, f"{row.ratio / middle:.2f}x the median ratio") if x)


def run(cfg: Config) -> list[Table]:
    return [run_length(cfg), journal_size(cfg)]
