"""A separate OS process that records the sample order with a ``saga()`` block (no planner).

    python -m tests.procs.block_child --journal URL --scope S --run RUN_ID [--crash-at reserve]
        [--crash-when before|after] [--flavour plain|recover|idempotent]

The block is ordinary code: charge, reserve, notify, one ``run.call`` each, the same calls on every
run of the process. ``--crash-at`` makes that tool's execute kill the process (``os._exit(17)``) before
or after its effect reached the ledger. Prints ``{"pid", "status", "outputs"}`` when the block ends.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from saga_worker import SideEffectRetryBlockedError, open_journal, saga
from tests.ledger import open_ledger, order_script
from tests.procs.run_child import run_tools


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--journal", required=True)
    parser.add_argument("--scope", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--crash-at", default=None)
    parser.add_argument("--crash-when", choices=["before", "after"], default="before")
    parser.add_argument("--flavour", choices=["plain", "recover", "idempotent"], default="plain")
    args = parser.parse_args(argv)
    journal = open_journal(args.journal, migrate=True)
    ledger = open_ledger(args.journal, args.scope)
    tools = run_tools(
        ledger,
        crash_at=args.crash_at,
        crash_when=args.crash_when,
        recover=args.flavour == "recover",
        idempotent=args.flavour == "idempotent",
    )
    outputs = []
    status: str  # the run's status, "open", or "blocked"
    try:
        with saga(args.run, journal=journal, tools=tools, prompt="sample order") as run:
            for call in order_script():
                outputs.append(run.call(call.tool, call.input))
        status = run.result.status if run.result is not None else "open"
    except SideEffectRetryBlockedError:
        status = "blocked"
    print(json.dumps({"pid": os.getpid(), "status": status, "outputs": outputs}), flush=True)
    ledger.close()
    journal.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
