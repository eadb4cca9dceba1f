"""Inputs an unwind must refuse before it writes anything (issue 10, items 4 and 7), on every journal:
a ``dry_run`` that is not a real boolean, an unwind id the journal cannot store, and a step message
that arrives before its turn or after the unwind halted."""

from __future__ import annotations

from typing import Any

import pytest

from saga_worker import (
    InvalidInputError,
    Journal,
    ToolCall,
    compensate_run,
    run_durable,
    scripted,
)
from saga_worker import executor as ex
from saga_worker.executor import Finalize, Step
from tests.compensation.order_chain import TTL, Provider


def order(journal: Journal, provider: Provider, run_id: str) -> None:
    result = run_durable(
        run_id,
        journal=journal,
        tools=provider.tools(),
        planner=scripted(ToolCall("charge", {"a": 1}), ToolCall("reserve", {"b": 2}), ToolCall("notify", {})),
    )
    assert result.status == "finished"


NOT_BOOLEANS: list[object] = [None, "", 0, 1, [], "false", "true", "no", 0.0]


@pytest.mark.parametrize("dry_run", NOT_BOOLEANS, ids=repr)
def test_compensate_run_refuses_a_dry_run_that_is_not_a_boolean_before_the_tombstone(
    journal: Journal, run_id: str, dry_run: Any
) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    with pytest.raises(InvalidInputError, match="dry_run must be true or false"):
        compensate_run(run_id, journal=journal, tools=provider.tools(), dry_run=dry_run)
    run = journal.get_run(run_id)
    assert run is not None and not run.condemned
    assert provider.calls == []


@pytest.mark.parametrize("dry_run", NOT_BOOLEANS, ids=repr)
def test_the_coordinator_refuses_a_dry_run_that_is_not_a_boolean_before_the_tombstone(
    journal: Journal, run_id: str, dry_run: Any
) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    with pytest.raises(InvalidInputError, match="dry_run must be true or false"):
        ex.start_unwind(journal, run_id, "u-1", dry_run=dry_run, claim_ttl=TTL)
    run = journal.get_run(run_id)
    assert run is not None and not run.condemned
    assert journal.get_unwind("u-1") is None


@pytest.mark.parametrize("unwind_id", ["u" * 201, "u" * 300, "", "tab\there", "nul\x00"], ids=len)
def test_an_unwind_id_the_journal_cannot_store_is_refused_before_the_tombstone(
    journal: Journal, run_id: str, unwind_id: str
) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    with pytest.raises(InvalidInputError, match="unwind id"):
        ex.start_unwind(journal, run_id, unwind_id, dry_run=False, claim_ttl=TTL)
    run = journal.get_run(run_id)
    assert run is not None and not run.condemned


def test_an_unwind_id_of_exactly_the_column_limit_is_accepted(journal: Journal, run_id: str) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    unwind_id = "u" * 200
    first = ex.start_unwind(journal, run_id, unwind_id, dry_run=False, claim_ttl=TTL)
    assert first == Step(run_id, unwind_id, "call-3", False, 0, 3)
    assert journal.get_unwind(unwind_id) is not None


def test_a_step_whose_earlier_step_has_no_outcome_yet_is_refused_and_runs_no_hook(
    journal: Journal, run_id: str
) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    for suffix in ("call-2", "call-1"):
        with pytest.raises(InvalidInputError, match="has no outcome yet"):
            ex.run_step(journal, provider.tools(), run_id, "u", suffix, claim_ttl=TTL)
    assert provider.calls == []
    assert journal.list_unwind_entries("u") == {}
    assert journal.get_claims([(run_id, s) for s in ("call-1", "call-2", "call-3")]) == {}


def test_a_step_after_the_unwind_halted_is_refused_and_the_report_stays_honest(
    journal: Journal, run_id: str
) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    provider.fail.add("notify")
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    assert ex.run_step(journal, provider.tools(), run_id, "u", "call-3", claim_ttl=TTL) == Finalize(
        run_id, "u"
    )
    provider.fail.clear()
    with pytest.raises(InvalidInputError, match=r"halted the unwind \(failed\)"):
        ex.run_step(journal, provider.tools(), run_id, "u", "call-2", claim_ttl=TTL)
    assert provider.calls == [f"{run_id}:comp:call-3"]  # reserve's hook never ran
    assert sorted(journal.list_unwind_entries("u")) == [0]
    assert journal.get_claim(run_id, "call-2") is None
    report = ex.finalize_unwind(journal, run_id, "u")
    assert [e.status.value for e in report.entries] == ["failed", "not-attempted", "not-attempted"]


def test_steps_in_order_run_one_after_another_and_a_redelivered_one_only_passes_on(
    journal: Journal, run_id: str
) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    nxt = ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    while isinstance(nxt, Step):
        got = ex.run_step(journal, provider.tools(), run_id, "u", nxt.suffix, claim_ttl=TTL)
        assert got is not None
        nxt = got
    report = ex.finalize_unwind(journal, run_id, "u")
    assert [e.status.value for e in report.entries] == ["compensated"] * 3
    # A redelivered step whose outcome is stored only passes the continuation on, as before.
    assert ex.run_step(journal, provider.tools(), run_id, "u", "call-1", claim_ttl=TTL) == Finalize(
        run_id, "u"
    )
    assert len(provider.calls) == 3
