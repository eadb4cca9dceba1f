"""A process to trace: records runs on a SQLite journal, then unwinds them, marking each phase.

    python -m bench.fsync_child JOURNAL_PATH --runs N --steps S [--idempotent] [--mark-hooks]

Marks (see ``bench.strace.mark``): ``phase:record`` before the runs are recorded, ``phase:unwind``
before they are unwound, ``phase:end`` after; with ``--mark-hooks`` also ``record`` / ``unwind``
before each run is recorded / unwound, ``execute`` inside every execute and ``hook`` inside every
compensate hook. The tools have side effects and no recover hook;
``--idempotent`` declares them ``idempotent=True``.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.strace import mark
from saga_worker import CallOptions, Tool, ToolCall, compensate_run, open_journal, run_durable, scripted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("journal")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--idempotent", action="store_true")
    parser.add_argument("--mark-hooks", action="store_true")
    args = parser.parse_args()

    def execute(_input: Any, _opts: CallOptions) -> dict[str, bool]:
        if args.mark_hooks:
            mark("execute")
        return {"ok": True}

    def compensate(_input: Any, _output: Any, _opts: CallOptions) -> None:
        if args.mark_hooks:
            mark("hook")

    tools = {"t": Tool(execute=execute, compensate=compensate, idempotent=args.idempotent)}
    journal = open_journal(f"sqlite:///{args.journal}")
    ids = [f"fsync-{i}" for i in range(args.runs)]
    mark("phase:record")
    for run_id in ids:
        if args.mark_hooks:
            mark("record")
        calls = [ToolCall("t", {"i": i}) for i in range(args.steps)]
        run_durable(run_id, journal=journal, tools=tools, planner=scripted(*calls), max_steps=args.steps + 1)
    mark("phase:unwind")
    for run_id in ids:
        if args.mark_hooks:
            mark("unwind")
        report = compensate_run(run_id, journal=journal, tools=tools)
        assert report.complete, report
    mark("phase:end")
    journal.close()


if __name__ == "__main__":
    main()
