"""What tracing costs (issue 27): a five-step run recorded and unwound in-process on a memory journal
(no storage: the engine's own cost, where any overhead shows most), in four processes that take turns
round by round so load hits them alike: the API absent (the baseline), the API absent again (a
control: the noise between two identical processes), the API without an SDK (its no-op tracer), and
the SDK recording every span into an in-memory exporter (bench/tracing_child.py).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

from bench.common import Row, Table
from bench.config import Config

REPO = Path(__file__).resolve().parents[1]
MODES = {
    "absent": "API absent (baseline)",
    "absent-again": "API absent, a second process (control: the noise)",
    "noop": "API, no SDK (no-op tracer)",
    "sdk": "SDK recording (in-memory exporter)",
}


class _Child:
    def __init__(self, mode: str) -> None:
        argv = [sys.executable, "-m", "bench.tracing_child", "absent" if mode == "absent-again" else mode]
        self.proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def ask(self, line: str) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def round(self, runs: int) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{runs}\n")
        self.proc.stdin.flush()
        return runs / float(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def run(cfg: Config) -> list[Table]:
    runs = 60 if cfg.quick else 300
    rounds = 9 if cfg.quick else 15  # short rounds, many: one stall moves a round, not the median
    children = {mode: _Child(mode) for mode in MODES}
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    try:
        sites = {
            mode: statistics.median(children[mode].ask("sites 20000") for _ in range(3))
            for mode in ("absent", "noop")
        }
        names = list(MODES)
        for i in range(rounds):
            shift = i % len(names)
            for mode in names[shift:] + names[:shift]:
                rates[mode].append(children[mode].round(runs))
    finally:
        for child in children.values():
            child.close()
    table = Table(
        "Tracing: a 5-step run recorded and unwound, memory journal, against the API absent",
        caption=f"{runs} runs a round, {rounds} rounds rotating between four processes; ratio = median of "
        "per-round cost ratios against the baseline of the same round",
    )
    base = rates["absent"]
    for mode, label in MODES.items():
        mine = rates[mode]
        ratio = statistics.median(b / m for m, b in zip(mine, base, strict=True))
        spread = sorted(b / m for m, b in zip(mine, base, strict=True))
        note = "" if mode == "absent" else f"per-round ratios {spread[0]:.2f}x .. {spread[-1]:.2f}x"
        table.add(
            Row(
                label,
                statistics.median(mine),
                "runs/s",
                floor_name="API absent" if mode != "absent" else "",
                floor=None if mode == "absent" else statistics.median(base),
                ratio=None if mode == "absent" else ratio,
                note=note,
            )
        )
    per_run = 1 / statistics.median(base)
    for mode, label, what in (
        ("absent", "API absent", "a function returning a constant"),
        ("noop", "API, no SDK", "a look at the global provider: no SDK, no span built"),
    ):
        table.add(
            Row(
                f"{label}: the tracing call sites alone, per run",
                sites[mode] * 1e6,
                "µs",
                note=f"{sites[mode] / per_run:.2%} of a run's {per_run * 1e6:.0f} µs ({what}, at each of "
                "the 22 call sites of a 5-step run and its unwind)",
            )
        )
    return [table]
