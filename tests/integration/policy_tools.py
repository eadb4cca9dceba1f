"""Tools with a compensation policy, for workers (``SAGA_TOOLS=tests.integration.policy_tools:tools``).

The sample order's tools (tests/ledger.py), each with ``compensate_timeout=1.5`` and
``RetryPolicy(3, initial_interval=0.5)``. Besides worker_tools' control files, a test steers one
run's hooks with files in ``SAGA_TEST_CONTROL``:

- ``{run_id}.flaky-{tool}``: the hook raises while the number written in the file is above 0,
  counting it down (one worker process per test holds the step's claim, so nobody races it);
- ``{run_id}.block-{tool}``: the hook notes ``entered:{tool}`` and blocks until
  ``{run_id}.release-{tool}`` exists.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from saga_worker import CallOptions, RetryPolicy, Tool
from saga_worker.settings import get_settings
from tests.ledger import open_ledger, order_tools

from .worker_tools import before_compensate, control_dir

TIMEOUT_S = 1.5
RETRY = RetryPolicy(3, initial_interval=0.5)


def tools() -> dict[str, Tool]:
    ledger = open_ledger(get_settings().resolved_journal_url(), scope=os.environ["SAGA_TEST_SCOPE"])

    def hook(name: str, input: Any, output: Any, opts: CallOptions) -> None:
        before_compensate(ledger, name, opts)
        base = control_dir() / f"{opts.run_id}."
        flaky = Path(f"{base}flaky-{name}")
        if flaky.exists():
            left = int(flaky.read_text() or "0")
            if left > 0:
                flaky.write_text(str(left - 1))
                raise ConnectionError(f"{name}: provider unavailable ({left} left)")
        if Path(f"{base}block-{name}").exists():
            ledger.call(opts.idempotency_key, f"entered:{name}")
            release = Path(f"{base}release-{name}")
            deadline = time.monotonic() + 600
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.05)

    return order_tools(ledger, before_compensate=hook, compensate_timeout=TIMEOUT_S, compensate_retry=RETRY)
