"""A megabyte where an id or an error text belongs costs a bounded amount of text everywhere after it:
refusals show a bounded part of the id, a hook's error is kept head and tail, on every journal
(issue 21, item 5). The same inputs against a live worker: tests/integration/test_celery_redis_postgres.py."""

from __future__ import annotations

from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    InvalidInputError,
    Journal,
    Tool,
    ToolCall,
    compensate_run,
    run_durable,
    scripted,
)
from saga_worker.core.checks import check_call_id, check_run_id, check_tool_name
from saga_worker.core.storable import ERROR_TEXT_MAX, exception_text

MEGABYTE = 1_000_000


@pytest.mark.parametrize("check", [check_run_id, check_call_id, check_tool_name])
def test_a_megabyte_id_is_refused_with_an_error_that_shows_a_bounded_part_of_it(check: Any) -> None:
    with pytest.raises(InvalidInputError) as refused:
        check("a" * MEGABYTE)
    message = str(refused.value)
    assert len(message) < 600 and "(1000000 characters)" in message
    assert all(len(str(v)) < 100 for v in refused.value.detail.values())


def test_an_exception_text_of_a_megabyte_keeps_its_head_and_tail_and_says_how_much_was_cut() -> None:
    text = exception_text(RuntimeError("head " + "x" * MEGABYTE + " tail"))
    assert len(text) < ERROR_TEXT_MAX + 100
    assert text.startswith("RuntimeError: head xxx") and text.endswith("xxx tail")
    assert f"[{len('RuntimeError: head ') + MEGABYTE + len(' tail') - ERROR_TEXT_MAX} characters cut]" in text


def test_a_hook_raising_a_megabyte_fails_its_step_with_a_bounded_error(journal: Journal, run_id: str) -> None:
    def refuse(input: Any, output: Any, opts: CallOptions) -> None:
        raise RuntimeError("provider said: " + "z" * MEGABYTE)

    tools = {"charge": Tool(lambda input, opts: {"ok": 1}, refuse)}
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(ToolCall("charge", {"a": 1})))

    report = compensate_run(run_id, journal=journal, tools=tools)

    [entry] = report.entries
    assert entry.status.value == "failed" and entry.error is not None
    assert (
        entry.error.startswith("RuntimeError: provider said: zzz") and len(entry.error) < ERROR_TEXT_MAX + 100
    )
    claim = journal.get_claim(run_id, entry.suffix)
    assert claim is not None and claim.error == entry.error  # stored as reported
