"""Each journal role (``saga_worker.journal.roles``) lists exactly the methods its consumers call.

The sets below are the table of issue 44's plan (§2): a method added to a role, or taken from it,
fails here first, so a role grows only on purpose. mypy checks that a ``Journal`` plays every role;
this checks it at run time on each backend too."""

from __future__ import annotations

from typing import Any, Generic, Protocol

import pytest

from saga_worker.journal import Journal
from saga_worker.journal.roles import OperatorJournal, RunJournal, UnwindJournal

SHARED_BY_ALL = {"now", "get_run", "get_record"}
ROLES: dict[type[Any], set[str]] = {
    UnwindJournal: SHARED_BY_ALL
    | {"get_gates", "append_audit", "read_audit"}
    | {"get_claim", "get_claims", "claim_compensation", "renew_claim", "finish_claim", "lease_left"}
    | {"finish_and_claim", "finish_last_step", "condemn_read_and_claim"}
    | {"set_unwind_state", "runs_to_sweep", "list_unwinds", "record_unwind_entry"}
    | {"count_redelivery", "forget_redeliveries"}
    | {
        "condemn_and_read",
        "read_worklist",
        "read_report",
        "read_step",
        "list_unwind_entries",
        "record_unwind",
        "finish_step",
    }
    | {"hold_sweep", "execution_guard", "executor_gone"},
    RunJournal: SHARED_BY_ALL
    | {"start_run", "end_run", "fork", "record_decision", "list_decisions", "list_records"}
    | {"claim_record", "reclaim_record", "complete_record", "record_in_transaction"}
    | {"renew_execution", "resolve_record"}
    | {"latest_shared", "get_shared", "insert_shared", "settle_shared"}
    | {"execution_guard", "executor_gone"},
    OperatorJournal: SHARED_BY_ALL
    | {"list_decisions", "page_runs", "list_records", "waiting_records"}
    | {"decide_call", "decide_compensation", "get_gates", "append_audit", "read_audit"}
    | {"get_claims", "list_unwinds", "get_unwind", "list_unwind_entries", "hold_sweep"}
    | {"journal_size", "queued_unwinds"},
}


def methods_of(role: type[Any]) -> set[str]:
    """The methods a role declares, itself or through the small protocols it composes."""
    return {
        name
        for cls in role.__mro__
        if cls not in (Protocol, Generic, object)
        for name, value in vars(cls).items()
        if callable(value) and not name.startswith("_")
    }


@pytest.mark.parametrize("role", list(ROLES), ids=lambda role: role.__name__)
def test_each_role_lists_exactly_the_methods_its_consumers_call(role: type[Any]) -> None:
    assert methods_of(role) == ROLES[role]


def test_the_roles_are_as_large_as_the_plan_counted() -> None:
    assert {role.__name__: len(methods_of(role)) for role in ROLES} == {
        "UnwindJournal": 31,
        "RunJournal": 21,
        "OperatorJournal": 19,
    }


def test_no_role_reaches_the_journals_lifecycle_or_its_raw_tombstone() -> None:
    """Opening, closing and fork-resetting a journal is the wiring's; ``condemn`` alone (without the
    worklist read after it) and ``insert_unwind`` are reached only through ``condemn_and_read`` and
    ``record_unwind``."""
    wiring = {"close", "reset_after_fork", "condemn", "insert_unwind", "list_runs", "count_runs"}
    assert all(not methods_of(role) & wiring for role in ROLES)


@pytest.mark.parametrize("role", list(ROLES), ids=lambda role: role.__name__)
def test_every_backend_has_every_method_of_each_role(journal: Journal, role: type[Any]) -> None:
    assert [name for name in sorted(methods_of(role)) if not callable(getattr(journal, name, None))] == []
