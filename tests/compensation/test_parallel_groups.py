"""Parallel unwind groups (docs/reference/compensation.md, "Groups"), on every journal: what a run records
as concurrent is undone side by side with ``parallel=True``, groups still in reverse order, the report in a
deterministic order, every per-step rule unchanged."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa

from saga_worker import (
    CallOptions,
    CompensationReport,
    InvalidInputError,
    Journal,
    SqlJournal,
    Tool,
    approve_compensation,
    compensate_run,
    saga,
)
from saga_worker.journal.schema import records as records_table
from saga_worker.settings import get_settings

from .group_hooks import TOGETHER, Hooks, record_fan_out, rows, tools_of, unwind_on_executor

Unwinder = Callable[[Journal, dict[str, Tool], str], CompensationReport]


def _in_process(journal: Journal, tools: dict[str, Tool], run_id: str) -> CompensationReport:
    return compensate_run(run_id, journal=journal, tools=tools, parallel=True)


def _on_executor(journal: Journal, tools: dict[str, Tool], run_id: str) -> CompensationReport:
    return unwind_on_executor(journal, tools, run_id)[0]


@pytest.fixture(params=["in process", "executor"])
def unwinder(request: pytest.FixtureRequest) -> Unwinder:
    """A parallel unwind in this process (``compensate_run``), or as the Celery executor runs it."""
    return _in_process if request.param == "in process" else _on_executor


@pytest.fixture
def parallel_max() -> Iterator[Any]:
    before = os.environ.get("SAGA_PARALLEL_MAX")

    def set_max(n: int) -> None:
        os.environ["SAGA_PARALLEL_MAX"] = str(n)
        get_settings.cache_clear()

    yield set_max
    if before is None:
        os.environ.pop("SAGA_PARALLEL_MAX", None)
    else:
        os.environ["SAGA_PARALLEL_MAX"] = before
    get_settings.cache_clear()


def test_a_parallel_unwind_undoes_a_group_side_by_side_and_lists_groups_in_reverse(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks(together=TOGETHER)
    hooks.meet = {"a", "b", "c"}
    tools = tools_of(hooks, ["book", "a", "b", "c", "notify"])
    record_fan_out(journal, run_id, tools, ["a", "b", "c"])

    report = compensate_run(run_id, journal=journal, tools=tools, parallel=True)

    # Groups last first; within the group, reverse recording order, whatever order they ended in.
    assert rows(report) == [
        ("notify", 3, "compensated"),
        ("c", 2, "compensated"),
        ("b", 2, "compensated"),
        ("a", 2, "compensated"),
        ("book", 1, "compensated"),
    ]
    assert report.complete and hooks.most_at_once == TOGETHER
    # Each step undone once, with its one stable key; notify before the group, book after it.
    names = [n for n, _ in hooks.undone]
    assert names[0] == "notify" and sorted(names[1:4]) == ["a", "b", "c"] and names[4] == "book"
    assert sorted(hooks.undone) == sorted((e.tool_name, e.idempotency_key) for e in report.entries)


def test_the_default_unwind_stays_sequential_and_still_numbers_every_entrys_group(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = tools_of(hooks, ["book", "a", "b", "c", "notify"])
    record_fan_out(journal, run_id, tools, ["a", "b", "c"])

    report = compensate_run(run_id, journal=journal, tools=tools)

    assert rows(report) == [
        ("notify", 3, "compensated"),
        ("c", 2, "compensated"),
        ("b", 2, "compensated"),
        ("a", 2, "compensated"),
        ("book", 1, "compensated"),
    ]
    assert [n for n, _ in hooks.undone] == ["notify", "c", "b", "a", "book"] and hooks.most_at_once == 1


def test_a_failed_step_lets_its_group_finish_and_leaves_every_earlier_group_not_attempted(
    journal: Journal, run_id: str, unwinder: Unwinder
) -> None:
    hooks = Hooks(together=TOGETHER)
    hooks.meet, hooks.fail = {"a", "b", "c"}, {"b"}
    tools = tools_of(hooks, ["book", "a", "b", "c", "notify"])
    record_fan_out(journal, run_id, tools, ["a", "b", "c"])

    report = unwinder(journal, tools, run_id)

    assert rows(report) == [
        ("notify", 3, "compensated"),
        ("c", 2, "compensated"),
        ("b", 2, "failed"),
        ("a", 2, "compensated"),
        ("book", 1, "not-attempted"),
    ]
    assert report.halt is not None and report.halt.value == "failed" and not report.complete
    assert "book" not in [n for n, _ in hooks.undone]


def test_a_redrive_after_a_halt_undoes_what_is_left_once_with_the_same_keys(
    journal: Journal, run_id: str, unwinder: Unwinder
) -> None:
    hooks = Hooks()
    hooks.fail = {"b"}
    tools = tools_of(hooks, ["book", "a", "b", "c", "notify"])
    record_fan_out(journal, run_id, tools, ["a", "b", "c"])
    first = unwinder(journal, tools, run_id)
    keys = {e.tool_name: e.idempotency_key for e in first.entries}

    hooks.fail.clear()
    again = unwinder(journal, tools, run_id)

    assert rows(again) == [
        ("notify", 3, "already-compensated"),
        ("c", 2, "already-compensated"),
        ("b", 2, "compensated"),
        ("a", 2, "already-compensated"),
        ("book", 1, "compensated"),
    ]
    assert again.complete and {e.tool_name: e.idempotency_key for e in again.entries} == keys
    # Every effect undone exactly once, each with its one key.
    assert sorted(hooks.undone) == sorted(keys.items())


def test_a_group_mixing_compensated_no_hook_uncertain_and_failed_reports_each_and_halts_after_it(
    journal: Journal, run_id: str, unwinder: Unwinder
) -> None:
    hooks = Hooks()
    hooks.fail = {"reserve"}
    tools = tools_of(
        hooks,
        ["book", "refund", "reserve", "notify"],
        email=hooks.tool("email", compensate=False),
        ship=hooks.tool("ship", fails_to_execute=True),
    )
    record_fan_out(journal, run_id, tools, ["refund", "email", "ship", "reserve"])

    report = unwinder(journal, tools, run_id)

    assert rows(report) == [
        ("notify", 3, "compensated"),
        ("reserve", 2, "failed"),
        ("ship", 2, "uncertain"),
        ("email", 2, "skipped-no-hook"),
        ("refund", 2, "compensated"),
        ("book", 1, "not-attempted"),
    ]
    assert sorted(n for n, _ in hooks.undone) == ["notify", "refund"]


def test_a_gate_inside_a_group_waits_for_a_person_while_its_neighbours_finish(
    journal: Journal, run_id: str, unwinder: Unwinder
) -> None:
    hooks = Hooks()
    tools = tools_of(hooks, ["book", "a", "c", "notify"], b=hooks.tool("b", compensate_needs_approval=True))
    record_fan_out(journal, run_id, tools, ["a", "b", "c"])

    first = unwinder(journal, tools, run_id)
    assert rows(first) == [
        ("notify", 3, "compensated"),
        ("c", 2, "compensated"),
        ("b", 2, "awaiting-approval"),
        ("a", 2, "compensated"),
        ("book", 1, "not-attempted"),
    ]
    assert first.entries[2].needs_approval and [e.suffix for e in first.awaiting_approval] == [
        first.entries[2].suffix
    ]

    approve_compensation(journal, run_id, first.entries[2].suffix, actor="alice", reason="ok")
    second = unwinder(journal, tools, run_id)
    assert [s for _, _, s in rows(second)] == [
        "already-compensated",
        "already-compensated",
        "compensated",
        "already-compensated",
        "compensated",
    ]
    assert second.complete and sorted(n for n, _ in hooks.undone) == ["a", "b", "book", "c", "notify"]


def test_a_parallel_dry_run_numbers_the_groups_and_calls_no_hook(journal: Journal, run_id: str) -> None:
    hooks = Hooks()
    tools = tools_of(hooks, ["book", "a", "b", "notify"])
    record_fan_out(journal, run_id, tools, ["a", "b"])

    plan = compensate_run(run_id, journal=journal, tools=tools, dry_run=True, parallel=True)

    assert rows(plan) == [
        ("notify", 3, "would-compensate"),
        ("b", 2, "would-compensate"),
        ("a", 2, "would-compensate"),
        ("book", 1, "would-compensate"),
    ]
    assert hooks.undone == [] and not plan.condemned


def test_a_group_larger_than_the_bound_runs_in_waves_and_stays_one_group(
    journal: Journal, run_id: str, parallel_max: Any
) -> None:
    parallel_max(2)
    hooks = Hooks(together=2)
    names = ["a", "b", "c", "d", "e"]
    hooks.meet = {"e", "d", "c", "b"}  # the two full waves meet; the last wave has "a" alone
    tools = tools_of(hooks, ["book", *names, "notify"])
    record_fan_out(journal, run_id, tools, names)

    report = compensate_run(run_id, journal=journal, tools=tools, parallel=True)

    assert [(n, g) for n, g, _ in rows(report)] == [
        ("notify", 3),
        ("e", 2),
        ("d", 2),
        ("c", 2),
        ("b", 2),
        ("a", 2),
        ("book", 1),
    ]
    assert report.complete and hooks.most_at_once == 2


def test_an_async_block_records_a_gather_of_acalls_as_one_group(journal: Journal, run_id: str) -> None:
    hooks = Hooks()
    tools = tools_of(hooks, ["book", "a", "b", "notify"])

    async def block() -> None:
        with saga(run_id, journal=journal, tools=tools) as run:
            await run.acall("book", {"n": 1})
            async with run.parallel():
                await asyncio.gather(run.acall("a", {"n": 2}), run.acall("b", {"n": 2}))
            await run.acall("notify", {"n": 3})

    asyncio.run(block())
    plan = compensate_run(run_id, journal=journal, tools=tools, dry_run=True, parallel=True)
    groups = {e.tool_name: e.group for e in plan.entries}
    assert groups == {"notify": 3, "a": 2, "b": 2, "book": 1}


def test_a_call_of_another_run_made_inside_a_parallel_block_is_not_in_its_group(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = tools_of(hooks, ["a", "b", "c"])
    other = f"{run_id}-other"
    with (
        saga(run_id, journal=journal, tools=tools) as run,
        saga(other, journal=journal, tools=tools) as side,
        run.parallel(),
    ):
        run.call("a", {})
        side.call("a", {})
        side.call("b", {})
        run.call("b", {})
    mine = compensate_run(run_id, journal=journal, tools=tools, dry_run=True)
    theirs = compensate_run(other, journal=journal, tools=tools, dry_run=True)
    assert [(e.tool_name, e.group) for e in mine.entries] == [("b", 1), ("a", 1)]
    assert [(e.tool_name, e.group) for e in theirs.entries] == [("b", 2), ("a", 1)]


@pytest.mark.backends("sqlite", "postgres")
def test_rows_of_the_previous_release_are_groups_of_one_and_it_still_reads_ours(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = tools_of(hooks, ["book", "a", "b", "notify"])
    record_fan_out(journal, run_id, tools, ["a", "b"])
    assert isinstance(journal, SqlJournal)
    # The previous release selects the columns it knows: every row of ours reads without `group`.
    known = [c for c in records_table.c if c.name != "group"]
    with journal.engine.begin() as conn:
        seen = conn.execute(sa.select(*known).where(records_table.c.run_id == run_id)).all()
        assert len(seen) == 4
        # A call it records inside our group (it writes no group) is a group of its own.
        conn.execute(
            sa.update(records_table)
            .where(records_table.c.run_id == run_id, records_table.c.tool_name == "b")
            .values(group=None)
        )
    plan = compensate_run(run_id, journal=journal, tools=tools, dry_run=True, parallel=True)
    assert [(e.tool_name, e.group) for e in plan.entries] == [("notify", 4), ("b", 3), ("a", 2), ("book", 1)]


def test_forward_calls_naming_one_group_are_one_group_and_a_bad_group_name_writes_nothing(
    journal: Journal, run_id: str
) -> None:
    from saga_worker.celery import record_call

    hooks = Hooks()
    tools = tools_of(hooks, ["book", "a", "b"])
    record_call(run_id, "book", {}, id="book", journal=journal, tools=tools)
    record_call(run_id, "a", {}, id="a", journal=journal, tools=tools, group="celery-group-1")
    record_call(run_id, "b", {}, id="b", journal=journal, tools=tools, group="celery-group-1")
    with pytest.raises(InvalidInputError, match="cannot name a group of calls"):
        record_call(run_id, "b", {}, id="b2", journal=journal, tools=tools, group="no spaces, please")

    plan = compensate_run(run_id, journal=journal, tools=tools, dry_run=True, parallel=True)
    assert [(e.tool_name, e.group) for e in plan.entries] == [("b", 2), ("a", 2), ("book", 1)]


class Crash(BaseException):
    """The process dying inside a hook: not an Exception, so nothing after the claim is written."""


def test_a_process_dying_in_one_hook_of_a_group_lets_the_others_land_and_a_redrive_undoes_each_once(
    journal: Journal, run_id: str, set_claim_ttl: Any
) -> None:
    set_claim_ttl(0.5)  # the dead holder's claim lapses quickly, as a killed process's does
    hooks = Hooks()
    tools = tools_of(hooks, ["book", "a", "c", "notify"])
    dying = {"b": True}

    def undo_b(input: Any, output: Any, opts: CallOptions) -> None:
        if dying["b"]:
            raise Crash()
        hooks.undone.append(("b", opts.idempotency_key))

    tools["b"] = Tool(lambda i, o: {"id": "b-1"}, undo_b)
    record_fan_out(journal, run_id, tools, ["a", "b", "c"])

    with pytest.raises(Crash):
        compensate_run(run_id, journal=journal, tools=tools, parallel=True)
    # The group's other steps finished before the crash surfaced; nothing earlier was touched.
    assert sorted(n for n, _ in hooks.undone) == ["a", "c", "notify"]

    dying["b"] = False
    deadline = time.monotonic() + 30
    while True:  # until the dead holder's lease has lapsed (busy meanwhile)
        again = compensate_run(run_id, journal=journal, tools=tools, parallel=True)
        if again.complete or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert rows(again) == [
        ("notify", 3, "already-compensated"),
        ("c", 2, "already-compensated"),
        ("b", 2, "compensated"),
        ("a", 2, "already-compensated"),
        ("book", 1, "compensated"),
    ]
    # At the ledger: every effect undone exactly once, each with its one key.
    assert sorted(hooks.undone) == sorted((e.tool_name, e.idempotency_key) for e in again.entries)


def test_parallel_must_be_a_real_boolean_and_a_refusal_condemns_nothing(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = tools_of(hooks, ["book", "a", "b", "notify"])
    record_fan_out(journal, run_id, tools, ["a", "b"])
    with pytest.raises(InvalidInputError, match="parallel must be true or false"):
        compensate_run(run_id, journal=journal, tools=tools, parallel="yes")  # type: ignore[arg-type]
    info = journal.get_run(run_id)
    assert info is not None and not info.condemned and hooks.undone == []


def test_calls_made_by_a_thread_pool_inside_a_parallel_block_are_its_group(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = tools_of(hooks, ["book", "a", "b", "c", "notify"])
    with saga(run_id, journal=journal, tools=tools) as run:
        run.call("book", {})
        with run.parallel(), ThreadPoolExecutor(3) as pool:  # a pool's threads carry no context
            list(pool.map(lambda name: run.call(name, {}, id=name), ["a", "b", "c"]))
        run.call("notify", {})

    plan = compensate_run(run_id, journal=journal, tools=tools, dry_run=True, parallel=True)
    assert {e.tool_name: e.group for e in plan.entries} == {"notify": 3, "a": 2, "b": 2, "c": 2, "book": 1}
