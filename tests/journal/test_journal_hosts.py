"""An unwind's writes never join an app's transaction (journal/hosts.py, issue 50): where a host
would lend its connection, each of them (the tombstone, a compensation's claim, lease and outcome,
the unwind's rows, the sweeper's state, a task's delivery count) is refused with
UnwindInTransactionError before anything is written, the loan never entered; the call's own rows
still join. A stand-in host (Django's is tested in tests/django_app/project/orders/)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

from saga_worker import Journal, OpenTransactionError
from saga_worker.errors import UnwindInTransactionError
from saga_worker.journal import hosts
from saga_worker.journal.records import (
    AuditAction,
    AuditVia,
    ClaimStatus,
    FinishedClaim,
    FirstClaim,
    NewAudit,
    NewRecord,
    RecordStatus,
    UnwindState,
)
from saga_worker.journal.roles import UnwindJournal

pytestmark = pytest.mark.backends("sqlite", "postgres")

RUN, SUFFIX = "lent-1", "pay:call-1"
DONE = FinishedClaim(RUN, SUFFIX, "o", ClaimStatus.COMPENSATED)  # an outcome the unwind would write


@pytest.fixture
def lending(journal: Journal) -> tuple[Callable[[], Any], list[str]]:
    """A context in which a host lends a stand-in connection for this journal's URL; ``entered``
    lists the loans entered (an unwind's write must enter none). The run and a call to unwind are
    written before, on the journal's own connection."""
    url = sa.engine.make_url(journal.url)
    entered: list[str] = []
    journal.start_run(RUN, "")
    journal.claim_record(RUN, NewRecord(SUFFIX, 0, "call-1", "pay", "call", {}, RUN), gated=True)
    journal.complete_record(RUN, SUFFIX, RecordStatus.SUCCEEDED, output={"id": 1})

    @contextmanager
    def loan() -> Iterator[Any]:
        entered.append("entered")
        raise AssertionError("the loan was entered")
        yield

    def host(asked: sa.URL) -> Any:
        return loan() if asked == url else None

    @contextmanager
    def lent() -> Iterator[None]:
        hosts.add_host(host)
        try:
            yield
        finally:
            hosts.remove_host(host)

    return lent, entered


UNWIND_WRITES: dict[str, Callable[[Journal], Any]] = {
    "condemn": lambda j: j.condemn(RUN),
    "condemn_and_read": lambda j: j.condemn_and_read(RUN, [RecordStatus.SUCCEEDED]),
    "claim_compensation": lambda j: j.claim_compensation(
        RUN, SUFFIX, via_run_id=RUN, owner="o", ttl=30.0, idempotency_key="k"
    ),
    "renew_claim": lambda j: j.renew_claim(RUN, SUFFIX, "o", 30.0),
    "finish_claim": lambda j: j.finish_claim(RUN, SUFFIX, "o", ClaimStatus.COMPENSATED),
    "finish_step": lambda j: j.finish_step(
        RUN, SUFFIX, "o", ClaimStatus.COMPENSATED, unwind_id="u-1", position=0, won={}, lost={}
    ),
    "record_unwind": lambda j: j.record_unwind("u-1", RUN, dry_run=False, suffixes=[SUFFIX], hold_grace=9.0),
    "insert_unwind": lambda j: j.insert_unwind("u-1", RUN, dry_run=False, suffixes=[SUFFIX]),
    "record_unwind_entry": lambda j: j.record_unwind_entry("u-1", 0, {"status": "compensated"}),
    "set_unwind_state": lambda j: j.set_unwind_state(RUN, UnwindState.COMPLETE),
    "hold_sweep": lambda j: j.hold_sweep(RUN, 9.0, "held"),
    "count_redelivery": lambda j: j.count_redelivery("task-1"),
    "forget_redeliveries": lambda j: j.forget_redeliveries("task-1"),
    "condemn_read_and_claim": lambda j: j.condemn_read_and_claim(
        RUN, [RecordStatus.SUCCEEDED], first=FirstClaim(frozenset({"pay"}), "o", RUN, 30.0)
    ),
    "finish_and_claim": lambda j: j.finish_and_claim(
        DONE, RUN, SUFFIX, via_run_id=RUN, owner="o", ttl=30.0, idempotency_key="k"
    ),
    "finish_last_step": lambda j: j.finish_last_step(
        DONE, RUN, epoch=None, audit=NewAudit(RUN, AuditAction.UNWOUND, "ann", AuditVia.CLI, "done")
    ),
}


@pytest.mark.parametrize("write", list(UNWIND_WRITES))
def test_an_unwind_s_write_is_refused_where_a_host_lends_and_nothing_is_written(
    journal: Journal, lending: tuple[Callable[[], Any], list[str]], write: str
) -> None:
    lent, entered = lending
    with lent(), pytest.raises(UnwindInTransactionError) as refused:
        UNWIND_WRITES[write](journal)
    assert isinstance(refused.value, OpenTransactionError)
    assert "on_commit" in str(refused.value)
    assert entered == []
    run = journal.get_run(RUN)
    assert run is not None and not run.condemned and run.unwind_state is UnwindState.NONE
    assert journal.get_claim(RUN, SUFFIX) is None
    assert journal.list_unwinds(RUN) == []


def test_a_run_s_own_write_still_enters_the_loan(
    journal: Journal, lending: tuple[Callable[[], Any], list[str]]
) -> None:
    lent, entered = lending
    with lent(), pytest.raises(AssertionError, match="entered"):
        journal.start_run("lent-2", "")
    assert entered == ["entered"]


# What an unwind's journal does besides the writes above: reads, and the audit row a decision or
# an unwind's end writes (a rollback un-makes it with the decision it records).
UNWIND_READS = {
    "now",
    "get_run",
    "get_record",
    "get_gates",
    "read_audit",
    "get_claim",
    "get_claims",
    "lease_left",
    "runs_to_sweep",
    "list_unwinds",
    "read_worklist",
    "read_report",
    "list_unwind_entries",
    "read_step",
    "execution_guard",
    "executor_gone",
}
JOINABLE = {"append_audit"}


def test_every_write_of_the_unwind_role_is_among_those_refused() -> None:
    """A new write on the unwind's side of the journal must be listed (and so tested) above."""
    methods = {name for name in dir(UnwindJournal) if not name.startswith("_")}
    assert methods - UNWIND_READS - JOINABLE <= set(UNWIND_WRITES)  # (and condemn, insert_unwind)
