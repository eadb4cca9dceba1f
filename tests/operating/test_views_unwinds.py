"""What the commands and the console show of a stored distributed unwind: the halting rule read the
same way as the report (stop at the first halting step, the rest not-attempted)."""

from __future__ import annotations

from typing import Any

from saga_worker import MemoryJournal
from saga_worker.operating.unwinds import list_unwinds

KNOWN = {"s1": {"tool_name": "reserve", "compensation_key": "key-s1"}}


def _entry(suffix: str, tool: str, status: str, **more: Any) -> dict[str, Any]:
    return {
        "suffix": suffix,
        "tool_name": tool,
        "status": status,
        "attempts": 1,
        "idempotency_key": f"k-{suffix}",
        **more,
    }


def _unwind(stored: dict[int, dict[str, Any]]) -> dict[str, Any]:
    journal = MemoryJournal()
    journal.start_run("r1", "")
    journal.condemn("r1")
    journal.insert_unwind("u1", "r1", dry_run=False, suffixes=["s3", "s2", "s1"])
    for position, entry in stored.items():
        journal.record_unwind_entry("u1", position, entry)
    [unwind] = list_unwinds(journal, "r1", steps_by_suffix=KNOWN)
    return unwind


def test_the_steps_after_a_halting_one_are_not_attempted_whatever_was_stored_for_them() -> None:
    unwind = _unwind(
        {
            0: _entry("s3", "notify", "compensated"),
            1: _entry("s2", "charge", "failed", error="declined, password=hunter2"),
            2: _entry("s1", "reserve", "compensated"),  # written by a stale delivery: not the unwind's
        }
    )
    assert [(s["suffix"], s["entry"]["status"]) for s in unwind["steps"]] == [
        ("s3", "compensated"),
        ("s2", "failed"),
        ("s1", "not-attempted"),
    ]
    last = unwind["steps"][2]["entry"]
    assert (last["tool_name"], last["attempts"], last["idempotency_key"]) == ("reserve", 0, "key-s1")
    assert "hunter2" not in unwind["steps"][1]["entry"]["error"]
    assert (unwind["outcome"], unwind["done"]) == ("halted-failed", True)


def test_an_unwind_under_way_shows_the_steps_not_yet_reached_as_empty() -> None:
    unwind = _unwind({0: _entry("s3", "notify", "compensated")})
    assert [s["entry"] and s["entry"]["status"] for s in unwind["steps"]] == ["compensated", None, None]
    assert (unwind["outcome"], unwind["done"]) == ("in progress", False)


def test_an_unwind_whose_every_step_is_stored_and_none_halts_is_complete() -> None:
    unwind = _unwind(
        {
            0: _entry("s3", "notify", "compensated"),
            1: _entry("s2", "charge", "skipped-no-hook"),
            2: _entry("s1", "reserve", "compensated"),
        }
    )
    assert (unwind["outcome"], unwind["done"]) == ("complete", True)
