"""A worker process for library-level faults: ``python -m tests.faults.child COMMAND ...``.

It reads ``SAGA_JOURNAL_URL``, ``FAULT_LEDGER_URL``, ``SAGA_CLAIM_TTL`` and ``SAGA_FAULTS`` from its
environment (the parent arms it; this entry point enables fault points, see saga_worker/core/faults.py), logs every report it gets to the ledger, and prints it as JSON.
``--skew`` shifts this process's wall clock (``time.time``), ``--break`` applies a broken build,
``--lock`` adds a Redis step lock.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests.faults.child")
    parser.add_argument("command", choices=["compensate", "sweep", "run"])
    parser.add_argument("run_ids", nargs="*")
    parser.add_argument("--skew", type=float, default=0.0)
    parser.add_argument("--break", dest="breaks", action="append", default=[])
    parser.add_argument("--lock", default="")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--group", type=int, default=0, help="run: the middle calls side by side, as one group"
    )
    parser.add_argument("--sleep", type=float, default=0.0, help="execute sleep of the last step (run)")
    parser.add_argument("--comp-sleep", type=float, default=0.0)
    parser.add_argument("--seconds", type=float, default=10.0, help="sweep: stop after this long idle")
    parser.add_argument("--go", default="", help="wait for this file before starting (a start line)")
    args = parser.parse_args(argv)
    from saga_worker.core import faults

    faults.enable()  # the harness arms this process through its SAGA_FAULTS / SAGA_FAULTS_DIR
    if args.skew:
        real = time.time
        time.time = lambda: real() + args.skew
    from tests.faults import breaks

    for name in args.breaks:
        breaks.apply(name)
    from saga_worker import compensate_run, open_journal
    from saga_worker.locks.redis import RedisStepLock
    from tests.faults import toolkit

    journal = open_journal(os.environ["SAGA_JOURNAL_URL"])
    lock = RedisStepLock.from_url(args.lock) if args.lock else None
    led = toolkit.ledger()
    while args.go and not os.path.exists(args.go):
        time.sleep(0.01)

    def unwind(run_id: str) -> dict[str, object]:
        report = compensate_run(run_id, journal=journal, tools=toolkit.TOOLS, lock=lock).model_dump(
            mode="json"
        )
        led.add_report(run_id, report)
        return report

    if args.command == "compensate":
        for run_id in args.run_ids:
            print(json.dumps(unwind(run_id)), flush=True)
    elif args.command == "sweep":
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < args.seconds:
            due = journal.runs_to_sweep(journal.now())
            for run in due:
                unwind(run.run_id)
            if due:
                idle_since = time.monotonic()
            time.sleep(0.2)
    elif args.command == "run":
        from tests.faults.harness import start_grouped_run, start_run

        for run_id in args.run_ids:
            if args.group:
                result = start_grouped_run(journal, run_id, args.group, comp_sleep=args.comp_sleep)
            else:
                result = start_run(
                    journal, run_id, args.steps, last_sleep=args.sleep, comp_sleep=args.comp_sleep
                )
            print(json.dumps({"run_id": run_id, "status": result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
