"""Tools for the bulk CLI tests (``SAGA_TOOLS=tests.cli.bulk_tools:TOOLS``): every effect and every
compensation goes to the ledger next to ``SAGA_JOURNAL_URL`` under ``SAGA_TEST_LEDGER_SCOPE``, so a
test reads what a command run in another process (and killed) did. Compensations take a moment
(``SAGA_TEST_UNDO_S``), so that a kill lands among them."""

from __future__ import annotations

import os
import time
from functools import cache
from typing import Any

from saga_worker import CallOptions, Tool
from tests.ledger import Ledger, open_ledger


@cache
def ledger() -> Ledger:
    return open_ledger(os.environ["SAGA_JOURNAL_URL"], os.environ["SAGA_TEST_LEDGER_SCOPE"])


def _execute(name: str) -> Any:
    def run(input: Any, opts: CallOptions) -> Any:
        ledger().effect(opts.idempotency_key, f"execute:{name}")
        return {"done": name}

    return run


def _compensate(name: str) -> Any:
    def undo(input: Any, output: Any, opts: CallOptions) -> None:
        time.sleep(float(os.environ.get("SAGA_TEST_UNDO_S", "0")))
        ledger().effect(opts.idempotency_key, f"compensate:{name}")

    return undo


TOOLS = {
    "charge": Tool(_execute("charge"), _compensate("charge")),
    "ship": Tool(_execute("ship"), _compensate("ship")),
    "refund": Tool(_execute("refund"), _compensate("refund"), compensate_needs_approval=True),
}
