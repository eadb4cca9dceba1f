"""Retention at scale: 50,000 ended runs on PostgreSQL pruned by ``saga-worker db prune``'s code.

Seeds the runs in bulk (``seed.py``: three succeeded calls each, one in ten condemned and fully
unwound with its claims), plus runs retention must keep (still running), then times
``operating.retention.prune`` over them in its default batches, optionally writing the archive, and
checks what it left: every seeded ended run a stub, every kept run whole.

    .venv/bin/python -m bench.prune                      # 50,000 runs, no archive
    .venv/bin/python -m bench.prune --runs 50000 --archive

Not a test: a figure (the operator's guide quotes it). Its own database, dropped at the end.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from saga_worker.journal.sql import SqlJournal
from saga_worker.operating.retention import archive_file, prune

from .common import Backend, new_id
from .seed import seed

STEPS = 3


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=50_000, help="ended runs to prune")
    parser.add_argument("--kept", type=int, default=1_000, help="running runs retention must keep")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--archive", action="store_true", help="also write the archive (JSON lines)")
    args = parser.parse_args()

    with Backend("postgres") as backend:
        journal = backend.journal
        assert isinstance(journal, SqlJournal) and backend.engine is not None
        compensated = args.runs // 10
        started = time.perf_counter()
        seed(backend.engine, (new_id("plain") for _ in range(args.runs - compensated)), STEPS)
        seed(backend.engine, (new_id("unwound") for _ in range(compensated)), STEPS, compensated=True)
        kept = [new_id("live") for _ in range(args.kept)]
        for run_id in kept:
            journal.start_run(run_id, "")
        with backend.engine.begin() as conn:
            total = conn.execute(sa.text("SELECT count(*) FROM saga_runs")).scalar_one()
            history = total - args.runs - args.kept
        print(
            f"seeded {args.runs:,} ended runs ({compensated:,} unwound) + {args.kept:,} running "
            f"+ {history:,} history runs, {STEPS} calls each, in {time.perf_counter() - started:.1f} s"
        )
        time.sleep(0.05)

        with tempfile.TemporaryDirectory(prefix="saga-bench-prune-") as tmp:
            path = Path(tmp) / "archive.jsonl"
            started = time.perf_counter()
            if args.archive:
                with archive_file(path) as archive:
                    summary = prune(journal, 0.01, batch=args.batch, archive=archive)
            else:
                summary = prune(journal, 0.01, batch=args.batch)
            took = time.perf_counter() - started
            archived = path.stat().st_size if path.exists() else 0

        size = journal.journal_size()
        with backend.engine.begin() as conn:
            left = conn.execute(sa.text("SELECT count(*) FROM saga_tool_records")).scalar_one()
        assert summary.pruned == args.runs + history, summary
        assert size.runs == args.kept and left == 0, (size, left)
        assert all(not r.pruned for r in (journal.get_run(k) for k in kept[:50]) if r is not None)
        print(
            f"pruned {summary.pruned:,} runs in {summary.batches} batches of {args.batch} in {took:.1f} s "
            f"({summary.pruned / took:,.0f} runs/s)"
            + (f", archive {archived / 1e6:.1f} MB" if args.archive else "")
            + f"; {size.runs:,} running runs kept, {size.pruned:,} stubs"
        )


if __name__ == "__main__":
    main()
