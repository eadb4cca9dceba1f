"""A process to trace for ``bench/commits.py``: seeds five-step runs, then unwinds them, marking the phase.

    python -m bench.commits_child sqlite|postgres --runs N

Marks (``bench.strace.mark``): ``phase:unwind`` before the counted unwinds, ``phase:end`` after. Ten
runs are unwound before the mark, so statement caches and connections are warm and left out.
"""

from __future__ import annotations

import argparse

from bench.common import Backend
from bench.seed import noop_tools, seed
from bench.strace import mark
from saga_worker import compensate_run

STEPS = 5
WARM = 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("backend", choices=("sqlite", "postgres"))
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    tools = noop_tools()
    with Backend(args.backend) as backend:
        assert backend.engine is not None
        ids = [f"commits-{i:06d}" for i in range(args.runs + WARM)]
        seed(backend.engine, ids, STEPS)
        for run_id in ids[:WARM]:
            compensate_run(run_id, journal=backend.journal, tools=tools)
        mark("phase:unwind")
        for run_id in ids[WARM:]:
            report = compensate_run(run_id, journal=backend.journal, tools=tools)
            assert report.complete, report
        mark("phase:end")


if __name__ == "__main__":
    main()
