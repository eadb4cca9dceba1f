"""A database connection cut while ``execute`` runs loses no compensation on PostgreSQL (issue 10, item 2).

The executing run and the unwinder are two journal objects on one PostgreSQL database, as two processes
would be. The executor's connections carry an ``application_name`` of their own, so the test finds them in
``pg_stat_activity`` and ends them with ``pg_terminate_backend`` (or reaches the database through a
loopback proxy it can cut). The effect is counted at an external ledger (tests/ledger.py): whatever the
unwind judged while the call was in flight, once the effect lands it is compensated exactly once, by the
sweeper coming back on its own, not by anyone calling ``compensate_run`` again.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from saga_worker import (
    CallOptions,
    CompensationReport,
    CompensationStatus,
    Journal,
    RecoverResult,
    Tool,
    ToolCall,
    compensate_run,
    open_journal,
    run_durable,
    scripted,
)
from saga_worker.executor import sweep
from saga_worker.journal.records import RecordStatus, UnwindState
from tests.faults.proxy import TcpProxy
from tests.ledger import Ledger

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.backends("postgres")]

WAIT_S = 30.0  # how long a wait may take before the test gives up (never an assertion on time)


class ChargeInFlight:
    """A charge whose effect lands only when the test says so; recover and compensate ask the ledger."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.started = threading.Event()
        self.land = threading.Event()

    def execute(self, input: Any, opts: CallOptions) -> Any:
        self.started.set()
        assert self.land.wait(WAIT_S), "the test never let the effect land"
        self.ledger.effect(opts.idempotency_key, "execute:charge")
        return {"charged": input["amount"]}

    def compensate(self, input: Any, output: Any, opts: CallOptions) -> None:
        self.ledger.effect(opts.idempotency_key, "compensate:charge")

    def recover(self, input: Any, opts: CallOptions) -> RecoverResult:
        done = opts.idempotency_key in self.ledger.effect_counts("execute")
        return RecoverResult(done=done, output={"charged": input["amount"]} if done else None)

    def tools(self) -> dict[str, Tool]:
        return {"charge": Tool(self.execute, self.compensate, self.recover)}


class RunInThread:
    """``run_durable`` of one charge on its own journal object, in a thread (a process of its own)."""

    def __init__(self, journal: Journal, run_id: str, charge: ChargeInFlight) -> None:
        self.outcome: dict[str, Any] = {}

        def drive() -> None:
            try:
                self.outcome["result"] = run_durable(
                    run_id,
                    journal=journal,
                    tools=charge.tools(),
                    planner=scripted(ToolCall("charge", {"amount": 10}), final="charged"),
                )
            except BaseException as exc:  # reported by the test, never lost in the thread
                self.outcome["error"] = exc

        self.thread = threading.Thread(target=drive, name="executing-run", daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the run never finished its call"


@pytest.fixture
def unwinder(pg_url: str) -> Iterator[Journal]:
    journal = open_journal(pg_url)
    yield journal
    journal.close()


def with_application_name(url: str, name: str) -> str:
    return sa.engine.make_url(url).update_query_dict({"application_name": name}).render_as_string(False)


def terminate_backends(url: str, application_name: str) -> int:
    """End every server process serving ``application_name`` and wait until they are gone."""
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    query = sa.text("SELECT pid FROM pg_stat_activity WHERE application_name = :name")
    try:
        with admin.connect() as conn:
            pids = conn.execute(query, {"name": application_name}).scalars().all()
            for pid in pids:
                conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            deadline = time.monotonic() + WAIT_S
            while conn.execute(query, {"name": application_name}).first() is not None:
                assert time.monotonic() < deadline, "the terminated backends never went away"
                time.sleep(0.05)
    finally:
        admin.dispose()
    return len(pids)


def sweep_until_settled(journal: Journal, tools: dict[str, Tool]) -> list[str]:
    """What the beat does: re-drive every due run (here, with the in-process unwind)."""
    return sweep(
        journal, enqueue=lambda run_id: compensate_run(run_id, journal=journal, tools=tools)
    ).redriven


def effects(ledger: Ledger) -> dict[str, Counter[str]]:
    return {what: ledger.effect_counts(what) for what in ("execute", "compensate")}


def charged_and_refunded_once(run_id: str) -> dict[str, Counter[str]]:
    return {"execute": Counter({f"{run_id}:call-1": 1}), "compensate": Counter({f"{run_id}:comp:call-1": 1})}


def test_a_killed_connection_mid_execute_leaves_the_unwind_open_and_the_late_effect_is_compensated(
    pg_url: str, unwinder: Journal, ledger: Ledger, run_id: str
) -> None:
    name = f"saga-executor-{uuid.uuid4().hex[:8]}"
    executor = open_journal(with_application_name(pg_url, name))
    charge = ChargeInFlight(ledger)
    try:
        run = RunInThread(executor, run_id, charge)
        assert charge.started.wait(WAIT_S)
        # A failover, a proxy timeout, an operator: every connection of the executing process is ended.
        assert terminate_backends(pg_url, name) >= 1

        during = compensate_run(run_id, journal=unwinder, tools=charge.tools())

        charge.land.set()  # the charge lands after the unwind looked
        run.join()
        redriven = sweep_until_settled(unwinder, charge.tools())
        swept = effects(ledger)  # before anyone unwinds again by hand: the sweeper alone came back
        final = compensate_run(run_id, journal=unwinder, tools=charge.tools())
    finally:
        charge.land.set()
        executor.close()

    assert swept == charged_and_refunded_once(run_id), "the charge that landed late was not refunded once"
    # While the call was in flight the unwind could not know: it said so, and did not call itself done.
    assert [e.status for e in during.entries] == [CompensationStatus.UNCERTAIN]
    assert not during.complete
    assert redriven == [run_id]
    assert [e.status for e in final.entries] == [CompensationStatus.ALREADY_COMPENSATED]
    record = unwinder.get_record(run_id, "call-1")
    assert record is not None and record.status is RecordStatus.SUCCEEDED


def test_an_execute_lease_that_lapsed_in_a_partition_lets_the_unwind_judge_and_the_late_outcome_reopens_it(
    pg_url: str, unwinder: Journal, ledger: Ledger, run_id: str, set_claim_ttl: Callable[[float], None]
) -> None:
    set_claim_ttl(1.0)  # a short lease, so that it lapses while the executor cannot reach the database
    port = int(sa.engine.make_url(pg_url).port or 5432)
    charge = ChargeInFlight(ledger)
    with TcpProxy(port) as proxy:
        proxied = sa.engine.make_url(pg_url).set(port=proxy.port).render_as_string(False)
        executor = open_journal(proxied)
        try:
            run = RunInThread(executor, run_id, charge)
            assert charge.started.wait(WAIT_S)
            proxy.pause()  # cut off: every connection dropped, no new one let through
            during = unwind_until_it_judges(unwinder, run_id, charge.tools())

            proxy.resume()
            charge.land.set()  # the charge lands after all, and its outcome reaches the journal
            run.join()
            redriven = sweep_until_settled(unwinder, charge.tools())
            swept = effects(ledger)  # before anyone unwinds again by hand: the sweeper alone came back
            final = compensate_run(run_id, journal=unwinder, tools=charge.tools())
        finally:
            charge.land.set()
            proxy.resume()
            executor.close()

    assert swept == charged_and_refunded_once(run_id), "the charge that landed late was not refunded once"
    # The lapsed lease let the unwind probe: recover truly said "not done" then, and the unwind ended.
    assert [e.status for e in during.entries] == [CompensationStatus.SKIPPED_NOT_EXECUTED]
    assert during.complete
    # The outcome that landed later reopened it; the sweeper came back and undid the charge.
    assert redriven == [run_id]
    assert [e.status for e in final.entries] == [CompensationStatus.ALREADY_COMPENSATED]
    after = unwinder.get_run(run_id)
    assert after is not None and after.unwind_state is UnwindState.COMPLETE


def unwind_until_it_judges(journal: Journal, run_id: str, tools: dict[str, Tool]) -> CompensationReport:
    """Unwind again and again while the call reads as in flight (``uncertain``), as the sweeper would."""
    deadline = time.monotonic() + WAIT_S
    while True:
        report = compensate_run(run_id, journal=journal, tools=tools)
        if [e.status for e in report.entries] != [CompensationStatus.UNCERTAIN]:
            return report
        assert time.monotonic() < deadline, "the unwind never stopped reading the call as in flight"
        time.sleep(0.1)
