"""A parallel unwind as the Celery executor runs it (docs/reference/compensation.md, "Groups"): the
coordinator cuts the worklist into groups and waves, each wave's steps run as step tasks side by
side, the step that ends a wave sends what comes next, and the report is the in-process unwind's.
Driven here through ``executor`` as the tasks drive it, each wave's steps on threads of their own;
tests/integration/test_parallel_on_workers.py runs the same on real workers."""

from __future__ import annotations

import pytest

from saga_worker import InvalidInputError, Journal, Tool, compensate_run, executor

from .group_hooks import CLAIM_TTL, TOGETHER, Hooks, record_fan_out, rows, tools_of, unwind_on_executor


def tool_of(journal: Journal, run_id: str, suffix: str) -> str:
    record = journal.get_record(run_id, suffix)
    assert record is not None
    return record.tool_name


def test_a_group_goes_out_as_one_wave_and_the_report_is_the_in_process_unwinds(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks(together=TOGETHER)
    hooks.meet = {"a", "b", "c"}  # their hooks return only if all three run at once
    tools = tools_of(hooks, ["book", "a", "b", "c", "notify"])
    record_fan_out(journal, run_id, tools, ["a", "b", "c"])

    report, seen, first = unwind_on_executor(journal, tools, run_id)

    assert isinstance(first, executor.Step) and tool_of(journal, run_id, first.suffix) == "notify"
    fans = [n for n in seen if isinstance(n, executor.Fan)]
    assert len(fans) == 1 and [tool_of(journal, run_id, s.suffix) for s in fans[0].steps] == ["c", "b", "a"]
    assert rows(report) == [
        ("notify", 3, "compensated"),
        ("c", 2, "compensated"),
        ("b", 2, "compensated"),
        ("a", 2, "compensated"),
        ("book", 1, "compensated"),
    ]
    assert report.complete and hooks.most_at_once == TOGETHER
    # book waited for the whole group; each step undone once with the key its entry names.
    assert [n for n, _ in hooks.undone][-1] == "book"
    assert sorted(hooks.undone) == sorted((e.tool_name, e.idempotency_key) for e in report.entries)


def test_the_executors_report_matches_the_in_process_parallel_unwind_step_for_step(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    hooks.fail = {"b"}
    tools = tools_of(hooks, ["book", "a", "b", "c", "notify"], skip=Tool(lambda i, o: {"ok": 1}, None))
    record_fan_out(journal, run_id, tools, ["a", "b", "skip", "c"])
    here_id = f"{run_id}-here"
    record_fan_out(journal, here_id, tools, ["a", "b", "skip", "c"])

    there, _, _ = unwind_on_executor(journal, tools, run_id)
    here = compensate_run(here_id, journal=journal, tools=tools, parallel=True)

    assert (
        rows(there)
        == rows(here)
        == [
            ("notify", 3, "compensated"),
            ("c", 2, "compensated"),
            ("skip", 2, "skipped-no-hook"),
            ("b", 2, "failed"),
            ("a", 2, "compensated"),
            ("book", 1, "not-attempted"),
        ]
    )
    assert there.halt == here.halt and not there.complete


def test_a_group_larger_than_the_bound_goes_in_waves_and_a_halt_in_the_first_wave_still_runs_the_second(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    hooks.fail = {"c"}  # in the first wave (c, b): the second wave (a) still runs, book does not
    tools = tools_of(hooks, ["book", "a", "b", "c", "notify"])
    record_fan_out(journal, run_id, tools, ["a", "b", "c"])

    report, seen, _ = unwind_on_executor(journal, tools, run_id, parallel_max=2)

    waves = [
        [tool_of(journal, run_id, s.suffix) for s in n.steps] for n in seen if isinstance(n, executor.Fan)
    ]
    singles = [tool_of(journal, run_id, n.suffix) for n in seen if isinstance(n, executor.Step)]
    assert waves[0] == ["c", "b"] and "a" in singles and "book" not in singles
    assert rows(report) == [
        ("notify", 3, "compensated"),
        ("c", 2, "failed"),
        ("b", 2, "compensated"),
        ("a", 2, "compensated"),
        ("book", 1, "not-attempted"),
    ]
    assert sorted(n for n, _ in hooks.undone) == ["a", "b", "notify"]


def test_a_step_sent_before_the_wave_before_it_ended_is_refused_and_undoes_nothing(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = tools_of(hooks, ["book", "a", "b", "c", "notify"])
    record_fan_out(journal, run_id, tools, ["a", "b", "c"])
    first = executor.start_unwind(
        journal, run_id, "u-early", dry_run=False, claim_ttl=CLAIM_TTL, parallel_max=8
    )
    assert isinstance(first, executor.Step)
    info = journal.get_unwind("u-early")
    assert info is not None
    by_tool = {tool_of(journal, run_id, s): s for s in info.suffixes}
    b_suffix, book_suffix = by_tool["b"], by_tool["book"]

    for suffix, why in (
        (b_suffix, f"no outcome yet: {by_tool['notify']}"),
        (book_suffix, f"no outcome yet: {by_tool['c']}"),
    ):
        with pytest.raises(InvalidInputError, match=why):
            executor.run_step(journal, tools, run_id, "u-early", suffix, claim_ttl=CLAIM_TTL)
    assert hooks.undone == []


def test_book_is_refused_after_a_group_that_halted_and_a_redelivered_step_only_goes_on(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    hooks.fail = {"a"}
    tools = tools_of(hooks, ["book", "a", "b", "c", "notify"])
    record_fan_out(journal, run_id, tools, ["a", "b", "c"])
    report, _, _ = unwind_on_executor(journal, tools, run_id)
    assert report.halt is not None
    unwind = journal.list_unwinds(run_id)[0]
    by_tool = {tool_of(journal, run_id, s): s for s in unwind.suffixes}
    book_suffix, c_suffix = by_tool["book"], by_tool["c"]

    with pytest.raises(InvalidInputError, match=f"group before it halted the unwind: {by_tool['a']} "):
        executor.run_step(journal, tools, run_id, unwind.unwind_id, book_suffix, claim_ttl=CLAIM_TTL)
    # A duplicate delivery of a group's step finds its entry and only says what comes next.
    again = executor.run_step(journal, tools, run_id, unwind.unwind_id, c_suffix, claim_ttl=CLAIM_TTL)
    assert isinstance(again, executor.Finalize)
    assert sorted(n for n, _ in hooks.undone) == ["b", "c", "notify"]


def test_a_dry_run_plans_the_groups_and_a_run_without_groups_is_a_plain_chain(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = tools_of(hooks, ["book", "a", "b", "c", "notify"])
    record_fan_out(journal, run_id, tools, ["a", "b"])
    plan, _, _ = unwind_on_executor(journal, tools, run_id, dry_run=True)
    assert [(n, g) for n, g, _ in rows(plan)] == [("notify", 3), ("b", 2), ("a", 2), ("book", 1)]
    assert plan.dry_run and hooks.undone == []

    lone = f"{run_id}-lone"
    from saga_worker import saga

    with saga(lone, journal=journal, tools=tools) as run:
        run.call("book", {"n": 1})
        run.call("notify", {"n": 2})
    report, seen, _ = unwind_on_executor(journal, tools, lone)
    stored = journal.list_unwinds(lone)[0]
    assert stored.groups is None and not any(isinstance(n, executor.Fan) for n in seen)
    assert [n for n, _, _ in rows(report)] == ["notify", "book"] and report.complete


def test_a_step_after_a_group_that_halted_early_in_its_order_is_refused_and_leaves_no_claim(
    journal: Journal, run_id: str
) -> None:
    # c halts (first of its group in unwind order); a, just before book in the worklist, compensated:
    # book must be refused on every journal, PostgreSQL's read-and-claim statement included.
    hooks = Hooks()
    hooks.fail = {"c"}
    tools = tools_of(hooks, ["book", "a", "b", "c", "notify"])
    record_fan_out(journal, run_id, tools, ["a", "b", "c"])
    report, _, _ = unwind_on_executor(journal, tools, run_id)
    assert [(n, s) for n, _, s in rows(report)][1:] == [
        ("c", "failed"),
        ("b", "compensated"),
        ("a", "compensated"),
        ("book", "not-attempted"),
    ]
    unwind = journal.list_unwinds(run_id)[0]
    book = unwind.suffixes[-1]

    with pytest.raises(InvalidInputError, match="group before it halted the unwind"):
        executor.run_step(journal, tools, run_id, unwind.unwind_id, book, claim_ttl=CLAIM_TTL)
    assert journal.get_claim(run_id, book) is None
    assert "book" not in [n for n, _ in hooks.undone]
