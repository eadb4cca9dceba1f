"""Smoke tier, Celery level: real workers (prefork pool) on the suite's own Redis and the session's
PostgreSQL journal, with faults at each point of a step task (docs/reference/celery.md, docs/reference/safety.md)."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from saga_worker import Journal

from . import scenarios
from .deployment import Deployment
from .harness import OwnPostgres, arm, fired, start_run, wait_for
from .ledger import Ledger
from .util import assert_clean, judged

pytestmark = [pytest.mark.celery, pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

POINTS = ["after_claim", "before_hook", "mid_hook", "after_hook", "after_outcome", "before_ack"]
SETTLED = {"compensated", "already-compensated"}


def unwound(journal: Journal, run_id: str) -> bool:
    run = journal.get_run(run_id)
    return run is not None and run.unwind_state.value == "complete"


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_of_a_pool_child_at_each_point_is_redelivered_and_the_caller_gets_a_true_report(
    point: str, deployment: Deployment, pg_journal: Journal, fault_ledger: Ledger, run_id: str
) -> None:
    out = scenarios.celery_kill_pool_child(deployment, pg_journal, fault_ledger, run_id, point)
    assert out.detail["fired"], "the fault never fired"
    assert out.detail["error"] == ""
    assert {e["status"] for e in out.detail["report"]["entries"]} <= SETTLED, out.detail["report"]
    assert {c.key for c in out.detail["calls"]} == {f"{run_id}:comp:call-2"}
    assert_clean(out.verdict)


@pytest.mark.parametrize("point", ["before_hook", "after_hook"])
def test_sigkill_of_a_whole_worker_mid_step_is_finished_by_another_worker_with_the_same_key(
    point: str, deployment: Deployment, pg_journal: Journal, fault_ledger: Ledger, run_id: str
) -> None:
    assert start_run(pg_journal, run_id, 3) == "finished"
    arm(deployment.fault_dir, f"{point}=stop@{run_id}:comp:call-2")  # hold it there, then kill everything
    first = deployment.start_worker()
    result = deployment.send(run_id)
    wait_for(lambda: fired(deployment.fault_dir), 60, "the fault to fire")
    first.kill()
    killed = time.monotonic()
    deployment.start_worker()
    report = result.get(timeout=90)
    fault_ledger.add_report(run_id, report)
    assert time.monotonic() - killed < 60
    assert {e["status"] for e in report["entries"]} <= SETTLED, report
    assert_clean(
        judged(fault_ledger, pg_journal, [run_id], excused_pids=[f[1] for f in fired(deployment.fault_dir)])
    )


def test_the_same_message_delivered_twice_calls_each_hook_once_and_reports_once(
    deployment: Deployment, pg_journal: Journal, fault_ledger: Ledger, run_id: str
) -> None:
    assert start_run(pg_journal, run_id, 3, comp_sleep=0.3) == "finished"
    deployment.start_worker(concurrency=2)
    task_id = str(uuid.uuid4())
    first = deployment.send(run_id, task_id=task_id)
    deployment.send(run_id, task_id=task_id)  # the very same message, twice
    report = first.get(timeout=60)
    fault_ledger.add_report(run_id, report)
    wait_for(lambda: unwound(pg_journal, run_id), 30, "the unwind to be complete")
    time.sleep(1.0)  # let the duplicate chain drain: it must find every step done
    verdict = judged(fault_ledger, pg_journal, [run_id])
    assert_clean(verdict)
    assert verdict.calls_per_step == [1, 1, 1]


@pytest.mark.parametrize("persistent", [False, True], ids=["no-persistence", "aof"])
def test_a_broker_restart_mid_unwind_loses_no_compensation(
    persistent: bool, deployment: Deployment, pg_journal: Journal, fault_ledger: Ledger, run_id: str
) -> None:
    if persistent:  # the same deployment on a Redis that keeps an append-only file
        deployment.redis.close()
        deployment.redis.__init__(persistent=True, port=deployment.redis.port)  # type: ignore[misc]  # the same server object, started anew
        deployment.redis.start()
    assert start_run(pg_journal, run_id, 3, comp_sleep=1.0) == "finished"
    deployment.start_worker(beat=True)
    deployment.send(run_id)
    wait_for(
        lambda: any(c.step == f"{run_id}:call-2" for c in fault_ledger.calls("compensate")),
        60,
        "the second step's hook to start",
    )
    deployment.redis.restart(down_for=1.0)
    back = time.monotonic()
    wait_for(lambda: unwound(pg_journal, run_id), 60, "the unwind to complete after the broker came back")
    assert time.monotonic() - back < 30
    assert_clean(judged(fault_ledger, pg_journal, [run_id]))


def test_a_postgresql_restart_mid_unwind_loses_no_compensation(
    deployment: Deployment, fault_ledger: Ledger, run_id: str
) -> None:
    from saga_worker import open_journal

    pg = OwnPostgres()
    try:
        pg.init()
        journal = open_journal(pg.url, migrate=True)
        deployment.journal_url = pg.url
        assert start_run(journal, run_id, 3, comp_sleep=1.0) == "finished"
        deployment.start_worker(beat=True)
        deployment.send(run_id)
        wait_for(
            lambda: any(c.step == f"{run_id}:call-2" for c in fault_ledger.calls("compensate")),
            60,
            "the second step's hook to start",
        )
        pg.restart(down_for=1.0)
        back = time.monotonic()
        wait_for(lambda: unwound(journal, run_id), 60, "the unwind to complete after PostgreSQL came back")
        assert time.monotonic() - back < 30
        assert_clean(judged(fault_ledger, journal, [run_id]))
        journal.close()
    finally:
        for worker in deployment.workers:
            worker.kill()
        pg.close()


def test_without_reject_on_worker_lost_a_killed_pool_child_loses_the_unwind(
    deployment: Deployment, pg_journal: Journal, fault_ledger: Ledger, run_id: str
) -> None:
    # The working build hands its caller the report in ~6 s (test_sigkill_of_a_pool_child_at_each_point_
    # ...); this one waits 30 s for it.
    out = scenarios.celery_kill_pool_child(
        deployment,
        pg_journal,
        fault_ledger,
        run_id,
        "before_hook",
        break_="no-reject-on-worker-lost",
        wait=30,
    )
    assert out.detail["error"], "the broken build should have handed the caller an error, not a report"
    assert out.verdict.lost, out.verdict.summary()


_ = signal  # SIGKILL/SIGSTOP reach workers through harness helpers


def test_the_beat_outlives_a_redis_restart_and_redrives_a_run_whose_messages_were_lost(
    deployment: Deployment, pg_journal: Journal, fault_ledger: Ledger, run_id: str
) -> None:
    assert start_run(pg_journal, run_id, 2) == "finished"
    worker = deployment.start_worker(beat=True)
    wait_for(
        lambda: b"Sending due task saga-retry-uncertain" in worker.log.read_bytes(), 30, "the beat to tick"
    )
    deployment.redis.restart(down_for=2.0)  # no persistence: the schedule, the beat lock, every message gone
    pg_journal.condemn(run_id)  # condemned, its compensate_run message never sent (as if lost with Redis)
    wait_for(lambda: unwound(pg_journal, run_id), 60, "the sweeper to re-drive the run")
    assert_clean(judged(fault_ledger, pg_journal, [run_id]))


def test_after_a_redis_restart_without_its_data_the_caller_gets_the_report_under_its_own_task_id(
    deployment: Deployment, pg_journal: Journal, fault_ledger: Ledger, run_id: str
) -> None:
    assert start_run(pg_journal, run_id, 3) == "finished"
    arm(deployment.fault_dir, f"before_hook=stop@{run_id}:comp:call-2")  # hold the step mid-chain
    first = deployment.start_worker()
    result = deployment.send(run_id)  # the coordinator accepts it: tombstone, worklist, first step
    wait_for(lambda: fired(deployment.fault_dir), 60, "the fault to fire")
    first.kill()
    deployment.redis.restart(down_for=1.0)  # no persistence: the step's message and every result gone
    deployment.start_worker(beat=True)  # the sweeper re-drives the run once its unwind is due

    report = result.get(timeout=90)

    fault_ledger.add_report(run_id, report)
    assert report["run_id"] == run_id and report["condemned"] is True
    assert {e["status"] for e in report["entries"]} <= SETTLED, report
    assert unwound(pg_journal, run_id)
    assert_clean(
        judged(fault_ledger, pg_journal, [run_id], excused_pids=[f[1] for f in fired(deployment.fault_dir)])
    )
