"""What the last step task of an unwind shows in Flower beside its own entry: how the unwind ended
(issue 48), so a halted unwind is seen without opening each step's row."""

from __future__ import annotations

from typing import Any

import pytest

from saga_worker.celery.tasks import _how_it_ended


def report(*statuses: str, dry_run: bool = False, tool_missing: bool = False) -> dict[str, Any]:
    entries = [
        {"suffix": f"call-{n}", "status": status, "tool_missing": tool_missing}
        for n, status in zip(range(len(statuses), 0, -1), statuses, strict=True)
    ]
    return {"dry_run": dry_run, "entries": entries}


@pytest.mark.parametrize(
    ("statuses", "said"),
    [
        (("compensated", "skipped-no-hook", "already-compensated"), "complete"),
        (("compensated", "busy", "not-attempted"), "halted at call-2 (busy)"),
        (("awaiting-approval", "not-attempted"), "halted at call-2 (awaiting-approval)"),
        (("compensated", "failed", "not-attempted"), "halted at call-2 (failed)"),
        (("uncertain", "compensated"), "incomplete"),
    ],
)
def test_the_last_step_says_how_the_unwind_ended(statuses: tuple[str, ...], said: str) -> None:
    assert _how_it_ended(report(*statuses)) == said


def test_a_dry_run_reads_planned_and_a_missing_tool_leaves_it_incomplete() -> None:
    assert _how_it_ended(report("would-compensate", dry_run=True)) == "planned"
    assert _how_it_ended(report("skipped-no-hook", tool_missing=True)) == "incomplete"
