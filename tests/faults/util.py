"""Small helpers the fault tests share: unwinding in-process into the ledger, and settling runs."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from saga_worker import Journal, compensate_run
from saga_worker.journal.records import ClaimStatus, UnwindState

from .checker import Verdict, check
from .ledger import Ledger
from .toolkit import make_tools


def unwind(
    journal: Journal, led: Ledger, run_id: str, *, claim_ttl: float = 2.0, lock: Any = None
) -> dict[str, Any]:
    report = compensate_run(
        run_id, journal=journal, tools=make_tools(lambda: led), claim_ttl=claim_ttl, lock=lock
    ).model_dump(mode="json")
    led.add_report(run_id, report)
    return report


def settle(
    journal: Journal, led: Ledger, run_ids: Iterable[str], *, timeout: float = 30.0, claim_ttl: float = 2.0
) -> float:
    """Re-drive as the sweeper does (only runs the journal says are pending or incomplete and due)
    until none of ``run_ids`` needs more; the seconds it took. Never forces an unwind the journal
    calls complete: a step it has forgotten stays forgotten, and the checker counts it lost."""
    began = time.monotonic()
    wanted = set(run_ids)
    while True:
        for run in journal.runs_to_sweep(journal.now(), limit=1000):
            if run.run_id in wanted:
                unwind(journal, led, run.run_id, claim_ttl=claim_ttl)
        open_runs = [r for r in wanted if _open(journal, r)]
        if not open_runs:
            return time.monotonic() - began
        if time.monotonic() - began > timeout:
            raise AssertionError(f"runs {open_runs} not settled after {timeout:.0f} s")
        time.sleep(0.1)


def _open(journal: Journal, run_id: str) -> bool:
    run = journal.get_run(run_id)
    return run is not None and run.unwind_state in (UnwindState.PENDING, UnwindState.INCOMPLETE)


def _complete(report: dict[str, Any]) -> bool:
    return all(
        e["status"] in ("compensated", "already-compensated", "skipped-not-executed", "skipped-no-hook")
        for e in report["entries"]
    )


def claim_status(journal: Journal, run_id: str, suffix: str) -> ClaimStatus | None:
    claim = journal.get_claim(run_id, suffix)
    return None if claim is None else claim.status


def assert_clean(verdict: Verdict) -> None:
    assert verdict.clean, verdict.summary()


def judged(led: Ledger, journal: Journal, run_ids: Iterable[str], **kw: Any) -> Verdict:
    return check(led, journal, run_ids, **kw)
