"""A tool's compensation policy (timeout, retries) on real workers: Redis broker, results and step
locks, a PostgreSQL journal. The step task applies the same policy as the in-process unwind."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from saga_worker import Journal
from saga_worker.core.keys import compensate_key
from saga_worker.journal.records import ClaimStatus
from tests.ledger import Ledger
from tests.reads import claim_of

from .conftest import Setup, Workers, redis_setup, wait_for
from .policy_tools import TIMEOUT_S
from .scenarios import GET_TIMEOUT_S, place_order, statuses, unwind

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, pg_database_url: str, module_workers: Workers) -> Setup:
    setup = redis_setup(tmp_path_factory.mktemp("policy"), pg_database_url)
    setup.saga["tools"] = "tests.integration.policy_tools:tools"
    module_workers.start(setup, concurrency=2)
    return setup


@pytest.fixture
def parts(running: Setup) -> Iterator[tuple[Celery, Journal, Ledger]]:
    client, journal, ledger = running.client(), running.journal(), running.ledger()
    yield client, journal, ledger
    ledger.close()
    journal.close()
    client.close()


def test_a_hook_that_fails_once_on_a_worker_is_retried_after_the_backoff_with_the_same_key(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    place_order(journal, ledger, run_id)
    running.control_file(run_id, "flaky", "reserve", "1")

    report = unwind(client, run_id)

    assert statuses(report) == ["compensated", "compensated", "compensated"]
    reserve = report["entries"][1]
    assert reserve["attempts"] == 2 and reserve["error"] is None
    key = compensate_key(run_id, "call-2")
    starts = [c for c in ledger.calls() if c.what == "start:reserve" and c.key.startswith(run_id)]
    assert [c.key for c in starts] == [key, key]
    assert starts[1].at - starts[0].at >= 0.5  # the policy's initial interval
    assert ledger.effect_counts("compensate")[key] == 1


def test_a_hanging_hook_on_a_worker_times_out_reads_failed_and_its_claim_is_held_until_it_ends(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    place_order(journal, ledger, run_id)
    running.control_file(run_id, "block", "reserve")
    ttl = running.settings().claim_ttl

    report = unwind(client, run_id)

    assert statuses(report) == ["compensated", "failed", "not-attempted"]
    error = report["entries"][1]["error"]
    assert error.startswith(f"compensate hook timed out after {TIMEOUT_S:g}s (attempt 1 of 3)")
    held = journal.get_claim(run_id, "call-2")
    assert held is not None and held.status is ClaimStatus.CLAIMED

    time.sleep(ttl * 2.5)  # well past the lease: the worker renews it while the hook can still land
    still = journal.get_claim(run_id, "call-2")
    assert still is not None and still.status is ClaimStatus.CLAIMED and still.owner == held.owner
    again = unwind(client, run_id)
    assert statuses(again) == ["already-compensated", "busy", "not-attempted"]
    key = compensate_key(run_id, "call-2")
    assert [c.key for c in ledger.calls() if c.what == "entered:reserve" and c.key.startswith(run_id)] == [
        key
    ]

    running.control_file(run_id, "release", "reserve")  # the hook returns: it undid the step after all
    wait_for(
        lambda: claim_of(journal, run_id, "call-2").status is ClaimStatus.COMPENSATED,
        60,
        "the hook's late outcome",
    )
    (running.control / f"{run_id}.block-reserve").unlink()
    final = unwind(client, run_id)
    assert statuses(final) == ["already-compensated", "already-compensated", "compensated"]
    ours = {k: n for k, n in ledger.effect_counts("compensate").items() if k.startswith(f"{run_id}:")}
    assert ours == {compensate_key(run_id, s): 1 for s in ("call-1", "call-2", "call-3")}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_hook_that_never_returns_on_a_worker_is_ended_by_the_step_tasks_hard_time_limit_then_redriven(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    place_order(journal, ledger, run_id)
    block = running.control_file(run_id, "block", "reserve")

    report = unwind(client, run_id)  # the caller has its report while the hook still runs

    assert statuses(report) == ["compensated", "failed", "not-attempted"]
    assert report["entries"][1]["error"].startswith("compensate hook timed out")
    key = compensate_key(run_id, "call-2")
    [entered] = [c for c in ledger.calls() if c.what == "entered:reserve" and c.key == key]
    held = journal.get_claim(run_id, "call-2")
    assert held is not None and held.status is ClaimStatus.CLAIMED
    block.unlink()  # from now on the hook returns at once; the hung call never will

    # The step task waits for its hook; at the hard time limit of its message the pool kills the child,
    # and the hook with it. Until then the child renews the claim: nobody else may call the hook.
    wait_for(lambda: not alive(entered.pid), 90, "the hard time limit to end the hook's pool child")
    claim = journal.get_claim(run_id, "call-2")
    assert claim is not None and claim.status is ClaimStatus.CLAIMED and claim.owner == held.owner
    wait_for(lambda: journal.now() > claim.lease_expires_at, 30, "the dead child's lease to lapse")

    final = unwind(client, run_id)
    assert statuses(final) == ["already-compensated", "compensated", "compensated"]
    assert final["entries"][1]["attempts"] == 2
    ours = [c for c in ledger.calls() if c.key == key]
    assert [c.what for c in ours if c.what != "compensate:reserve"] == [
        "start:reserve",  # the call the hard limit ended
        "entered:reserve",
        "start:reserve",  # the re-driven call, same key
    ]
    assert ledger.effect_counts("compensate")[key] == 1


def test_an_unwind_sent_with_an_errback_gets_its_report_and_keeps_it_when_the_hard_limit_ends_the_hung_hook(
    tmp_path: Path, pg_database_url: str, workers: Workers, run_id: str
) -> None:
    running = redis_setup(tmp_path, pg_database_url)
    running.saga["tools"] = "tests.integration.policy_tools:tools"
    # No redelivery while the step task waits for its hook (a duplicate would store the report too).
    running.saga["visibility_timeout"] = 600.0
    workers.start(running, concurrency=2)
    client, journal, ledger = running.client(), running.journal(), running.ledger()
    place_order(journal, ledger, run_id)
    block = running.control_file(run_id, "block", "reserve")
    # An errback makes the steps go on with replace(), under the coordinator's task id. It names a
    # task no worker has, on a queue nobody reads: sent, it stays there for the test to see.
    errbacks = f"{running.saga['queue']}-errbacks"
    request = client.signature("saga.compensate_run", args=(run_id,))
    request.link_error(client.signature("tests.unwind_failed", queue=errbacks))
    result = request.apply_async()

    report = dict(result.get(timeout=GET_TIMEOUT_S, interval=0.05))

    assert statuses(report) == ["compensated", "failed", "not-attempted"]
    assert report["entries"][1]["error"].startswith("compensate hook timed out")
    key = compensate_key(run_id, "call-2")
    [entered] = [c for c in ledger.calls() if c.what == "entered:reserve" and c.key == key]
    block.unlink()
    # The step task, its report stored, waits for the hung hook until the hard limit kills its child.
    wait_for(lambda: not alive(entered.pid), 90, "the hard time limit to end the hook's pool child")
    stored = client.backend.get_task_meta(result.id, cache=False)
    assert (stored["status"], stored["result"]) == ("SUCCESS", report)
    broker = redis.Redis.from_url(running.saga["broker_url"])
    try:
        assert broker.llen(errbacks) == 0, "the errback fired for an unwind that ended with its report"
    finally:
        broker.close()
        ledger.close()
        journal.close()
        client.close()
