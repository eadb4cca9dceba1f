"""How big each measurement is: the full run (under ~10 minutes on 2 cores) or ``--quick``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class Config:
    quick: bool = False
    only_backends: tuple[str, ...] = ()
    rounds: int = 5
    unwind_runs: int = 1000  # five-step runs unwound per backend (issue 6: 1,000)
    peer_runs: int = 100  # five-step runs unwound per round next to the peers (issue 26)
    peer_rounds: int = 15  # short rounds, many of them: one fsync stall moves a round, not the median
    record_runs: int = 300  # five-step runs recorded per backend
    run_lengths: tuple[int, ...] = (1, 10, 100, 1000)
    steps_per_length: int = 1000  # steps unwound at each run length
    journal_sizes: tuple[int, ...] = (10**3, 10**4, 10**5, 10**6)
    size_probe_runs: int = 100  # five-step runs unwound at each journal size
    latency_samples: int = 150
    noop_tasks: int = 2000
    dist_runs: int = 300  # five-step runs unwound through the workers for throughput
    rss_unwinds: int = 2_000  # issue 6 asks for 10,000: `--rss-unwinds 10000` (about 8 more minutes here)
    embedded_share: float = 0.2  # the embedded SQLite broker moves ~25 tasks/s: a fifth of the counts
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def make(cls, quick: bool, backends: tuple[str, ...] = ()) -> Config:
        if not quick:
            return cls(only_backends=backends)
        return cls(
            quick=True,
            only_backends=backends,
            rounds=3,
            unwind_runs=150,
            peer_runs=40,
            peer_rounds=9,
            record_runs=60,
            run_lengths=(1, 10, 100, 1000),
            steps_per_length=300,
            journal_sizes=(10**3, 10**4, 10**5),
            size_probe_runs=60,
            latency_samples=40,
            noop_tasks=500,
            dist_runs=60,
            rss_unwinds=500,
        )

    def backends(self, wanted: Iterable[str]) -> list[str]:
        return [b for b in wanted if not self.only_backends or b in self.only_backends]
