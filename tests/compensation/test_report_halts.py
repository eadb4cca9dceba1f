"""Which statuses halt an unwind (compensation/report.py's ``halts``, ``halted_at`` and the report's
``halt``, ``complete`` and ``counts``), whatever form the status comes in: a member, its text (a
report's JSON, a stored entry), or something that is no status at all."""

from __future__ import annotations

import pytest

from saga_worker.compensation.report import (
    CompensationEntry,
    CompensationReport,
    CompensationStatus,
    halted_at,
    halts,
)

S = CompensationStatus


@pytest.mark.parametrize("status", list(S))
def test_a_status_halts_as_its_text_does(status: CompensationStatus) -> None:
    expected = status in (S.BUSY, S.FAILED, S.AWAITING_APPROVAL)
    assert halts(status) is expected
    assert halts(status.value) is expected


@pytest.mark.parametrize("value", ["Failed", "unknown", "", None, 3, ["failed"], {"busy": 1}])
def test_a_value_that_is_no_status_does_not_halt(value: object) -> None:
    assert halts(value) is False


def test_the_first_halting_status_is_the_halt_as_a_member() -> None:
    assert halted_at(["compensated", "busy", "failed"]) is S.BUSY
    assert halted_at([S.COMPENSATED, S.NOT_ATTEMPTED]) is None


def _report(
    *statuses: CompensationStatus, missing: bool = False, dry_run: bool = False
) -> CompensationReport:
    entries = [
        CompensationEntry(
            suffix=f"call-{i}",
            tool_call_id=f"c{i}",
            tool_name="t",
            status=s,
            record_status="succeeded",
            idempotency_key=f"k{i}",
            origin_run_id="r",
            tool_missing=missing and i == 0,
        )
        for i, s in enumerate(statuses)
    ]
    return CompensationReport(run_id="r", dry_run=dry_run, condemned=True, entries=entries)


def test_a_report_reads_its_halt_completeness_and_counts_from_its_entries() -> None:
    done = _report(S.COMPENSATED, S.SKIPPED_NO_HOOK, S.COMPENSATED)
    assert done.complete and done.halt is None and not done.halted
    assert done.counts() == {"compensated": 2, "skipped-no-hook": 1}
    halted = _report(S.COMPENSATED, S.FAILED, S.NOT_ATTEMPTED)
    assert not halted.complete and halted.halt is S.FAILED and halted.halted
    assert halted.counts() == {"compensated": 1, "failed": 1, "not-attempted": 1}
    assert not _report(S.SKIPPED_NO_HOOK, missing=True).complete  # nothing undone: a person must look
    assert not _report(S.COMPENSATED, dry_run=True).complete
    assert not _report(S.UNCERTAIN).complete and _report(S.UNCERTAIN).halt is None
