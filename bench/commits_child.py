"""A process to trace for ``bench/commits.py``: seeds five-step runs, then unwinds them, marking the phase.

    python -m bench.commits_child sqlite|postgres --runs N [--prior M]

Marks (``bench.strace.mark``): ``phase:unwind`` before the counted unwinds, ``phase:end`` after. Ten
runs are unwound before the mark, so statement caches and connections are warm and left out.
``--prior M``: a journal of M ended runs first, one in ten of them unwound (ids that sort after the
counted runs', so the counted unwinds write inside the indexes, not only at their ends). With
$SAGA_BENCH_PAGES set (``bench.commits --breakdown``, SQLite): also ``run`` before each counted unwind,
and, at the end, which table or index each page of the database belongs to (``dbstat``), as JSON in
that file. ``--drop-indexes A,B`` (SQLite): those indexes dropped before the counted unwinds, to
measure what a commit writes without them (``bench.commits --drop-indexes``).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3

from bench.common import Backend
from bench.seed import noop_tools, seed
from bench.strace import PAGES_ENV, mark
from saga_worker import compensate_run

STEPS = 5
WARM = 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("backend", choices=("sqlite", "postgres"))
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--prior", type=int, default=0)
    parser.add_argument("--drop-indexes", default="")
    args = parser.parse_args()
    tools = noop_tools()
    with Backend(args.backend) as backend:
        assert backend.engine is not None
        if args.prior:  # one run in ten unwound, the others ended without an unwind
            prior = [f"prior-{i:07d}" for i in range(args.prior)]
            seed(backend.engine, prior[::10], STEPS, compensated=True)
            seed(backend.engine, [r for i, r in enumerate(prior) if i % 10], STEPS)
        ids = [f"commits-{i:06d}" for i in range(args.runs + WARM)]
        seed(backend.engine, ids, STEPS)
        for run_id in ids[:WARM]:
            compensate_run(run_id, journal=backend.journal, tools=tools)
        if args.drop_indexes:
            with backend.engine.begin() as connection:
                for name in args.drop_indexes.split(","):
                    connection.exec_driver_sql(f'DROP INDEX "{name}"')
        pages = os.environ.get(PAGES_ENV)
        mark("phase:unwind")
        for run_id in ids[WARM:]:
            if pages:
                mark("run")
            report = compensate_run(run_id, journal=backend.journal, tools=tools)
            assert report.complete, report
        mark("phase:end")
        if pages and args.backend == "sqlite":
            path = backend.url.removeprefix("sqlite:///")
            with sqlite3.connect(path) as db:
                owners = dict(db.execute("SELECT pageno, name FROM dbstat"))
            with open(pages, "w") as out:
                json.dump(owners, out)


if __name__ == "__main__":
    main()
