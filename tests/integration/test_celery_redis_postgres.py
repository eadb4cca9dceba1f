"""The distributed executor on Redis (broker, results, step locks) with a PostgreSQL journal: real
workers, real redelivery when a pool child or a whole worker dies mid-hook."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from celery.utils.saferepr import saferepr as celery_saferepr

from saga_worker import Journal
from saga_worker.core.keys import compensate_key
from tests.ledger import Ledger
from tests.services import REDIS_URL, require
from tests.worker_process import WorkerProcess

from . import scenarios
from .conftest import REPO, Setup, Worker, Workers, make_setup, redis_db, redis_setup, wait_for

pytestmark = [
    pytest.mark.celery,
    pytest.mark.redis,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.each_python,
]


def unacked(broker: redis.Redis) -> bytes:
    """Every message the broker holds as delivered but not acknowledged, as one byte string."""
    return b"".join(v if isinstance(v, bytes) else v.encode() for v in broker.hvals("unacked"))


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, pg_database_url: str) -> Setup:
    return redis_setup(tmp_path_factory.mktemp("redis"), pg_database_url)


@pytest.fixture(scope="module")
def running(setup: Setup, module_workers: Workers) -> Setup:
    # With --events, as docker-compose's worker runs for Flower (task events are off without it).
    module_workers.start(setup, concurrency=2, events=True)
    return setup


@pytest.fixture
def parts(setup: Setup) -> Iterator[tuple[Celery, Journal, Ledger]]:
    client, journal, ledger = setup.client(), setup.journal(), setup.ledger()
    yield client, journal, ledger
    ledger.close()
    journal.close()
    client.close()


def test_report_over_celery_equals_the_library_report_for_the_same_journal_state(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.report_equals_the_library_report(running, *parts, run_id)


def test_dry_run_over_celery_plans_without_condemning_or_calling_a_hook(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.dry_run_plans_without_condemning(running, *parts, run_id)


def test_failing_step_halts_the_chain_and_the_caller_gets_a_report_not_an_exception(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.failing_step_halts_with_a_report(running, *parts, run_id)


def test_hook_error_the_database_cannot_store_still_gives_the_caller_a_readable_report(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.unstorable_error_text_halts_with_a_readable_report(running, *parts, run_id)


def test_task_sent_by_name_unwinds_the_run_and_returns_the_report(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.task_sent_by_name_returns_the_report(running, *parts, run_id)


def test_two_delay_calls_for_one_run_at_once_compensate_every_step_exactly_once(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.two_unwinds_at_once_compensate_each_step_once(running, *parts, run_id)


def test_pool_child_killed_mid_hook_is_redelivered_and_every_step_is_compensated_once_with_the_same_key(
    tmp_path: Path, pg_database_url: str, workers: Workers, run_id: str
) -> None:
    setup = redis_setup(tmp_path, pg_database_url)
    workers.start(setup, concurrency=1)
    client, journal, ledger = setup.client(), setup.journal(), setup.ledger()
    scenarios.place_order(journal, ledger, run_id)
    setup.control_file(run_id, "kill", "reserve")
    report = scenarios.unwind(client, run_id)
    assert scenarios.statuses(report) == ["compensated"] * 3
    assert scenarios.compensations(ledger, run_id) == {s: 1 for s in scenarios.SUFFIXES}
    key = compensate_key(run_id, "call-2")
    assert ledger.call_counts("start:reserve")[key] == 2  # killed once, re-driven with the same key
    assert {c.key for c in ledger.calls("start:reserve")} == {key}
    assert report["entries"][1]["attempts"] == 2


def test_a_hook_that_kills_its_worker_every_time_is_called_max_deliveries_times_then_its_step_fails_and_the_worker_serves_on(
    tmp_path: Path, pg_database_url: str, workers: Workers, run_id: str
) -> None:
    setup = redis_setup(tmp_path, pg_database_url)
    workers.start(setup, concurrency=1)
    client, journal, ledger = setup.client(), setup.journal(), setup.ledger()
    broker = redis.Redis.from_url(setup.saga["broker_url"])

    def acked() -> None:
        wait_for(lambda: run_id.encode() not in unacked(broker), 30, "the refused step's message to be acked")
        queued = broker.lrange(setup.saga["queue"], 0, -1)
        assert not any(run_id in (m if isinstance(m, str) else m.decode()) for m in queued)

    try:
        scenarios.hook_that_kills_its_worker_every_time(setup, client, journal, ledger, run_id, acked)
    finally:
        broker.close()
        ledger.close()
        journal.close()
        client.close()


def test_whole_worker_killed_mid_hook_is_redelivered_to_another_worker_and_every_step_compensated_once(
    tmp_path: Path, pg_database_url: str, workers: Workers, run_id: str
) -> None:
    setup = redis_setup(tmp_path, pg_database_url)
    first = workers.start(setup, concurrency=1)
    client, journal, ledger = setup.client(), setup.journal(), setup.ledger()
    scenarios.place_order(journal, ledger, run_id)
    setup.control_file(run_id, "hang", "reserve")
    pending = client.signature("saga.compensate_run").delay(run_id)
    wait_for(lambda: (setup.control / f"{run_id}.hanging-reserve").exists(), 60, "the reserve hook to start")
    first.kill()
    workers.start(setup, concurrency=1)  # the message comes back after the visibility timeout
    report = pending.get(timeout=90, interval=0.1)
    assert scenarios.statuses(report) == ["compensated"] * 3
    assert scenarios.compensations(ledger, run_id) == {s: 1 for s in scenarios.SUFFIXES}
    key = compensate_key(run_id, "call-2")
    assert ledger.call_counts("start:reserve")[key] == 2
    assert {c.key for c in ledger.calls("start:reserve")} == {key}


def test_step_tasks_send_a_compensating_event_naming_the_run_and_the_step_for_flower(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    scenarios.place_order(journal, ledger, run_id)
    seen: list[dict[str, Any]] = []  # events as decoded from the broker's JSON
    succeeded: list[dict[str, Any]] = []
    listening = threading.Event()
    with client.connection_for_read() as conn:
        handlers = {"task-compensating": seen.append, "task-succeeded": succeeded.append}
        receiver = client.events.Receiver(conn, handlers=handlers)
        receiver.on_consume_ready = lambda *a, **k: listening.set()

        def listen() -> None:
            for _ in receiver.consume(limit=None, timeout=None, safety_interval=0.2):
                pass

        thread = threading.Thread(target=listen, daemon=True)
        thread.start()
        wait_for(listening.is_set, 30, "the event receiver")
        pending = client.signature("saga.compensate_run").delay(run_id)
        report = pending.get(timeout=60, interval=0.05)
        assert scenarios.statuses(report) == ["compensated"] * 3
        wait_for(lambda: len([e for e in seen if e.get("run_id") == run_id]) == 3, 30, "three step events")
        steps = {f"{run_id}:{s}:{pending.id}" for s in scenarios.SUFFIXES}
        wait_for(lambda: steps <= {e["uuid"] for e in succeeded}, 30, "three steps to succeed")
        receiver.should_stop = True
        thread.join(timeout=10)
    mine = [e for e in seen if e.get("run_id") == run_id]
    assert [e["suffix"] for e in mine] == scenarios.SUFFIXES
    # Each step under a task id of its own: run, step, unwind (the coordinator's id) (issue 23).
    assert [e["uuid"] for e in mine] == [f"{run_id}:{s}:{pending.id}" for s in scenarios.SUFFIXES]
    # Flower's state machine turns a custom "task-<name>" event into that state.
    from celery.events.state import State

    state = State()
    for event in mine:
        state.event(dict(event))
    tasks = dict(state.itertasks())
    assert [tasks[e["uuid"]].state for e in mine] == ["COMPENSATING"] * 3
    # Then each step's result, as Flower shows it: its report entry (but the group's number, which the
    # whole report gives), in the text Celery itself writes.
    shown = {e["uuid"]: e["result"] for e in succeeded if e["uuid"] in steps}
    # The unwind's last step (call-1) also says how the unwind ended (issue 48).
    for entry in report["entries"]:
        shown_entry = {"run_id": run_id, **{k: v for k, v in entry.items() if k != "group"}}
        if entry["suffix"] == "call-1":
            shown_entry["unwind"] = "complete"
        text = celery_saferepr(shown_entry, 1024)
        assert shown[f"{run_id}:{entry['suffix']}:{pending.id}"] == text


def test_two_beat_processes_on_redis_run_one_sweeper_schedule_between_them(
    tmp_path: Path, pg_database_url: str
) -> None:
    import redis

    setup = redis_setup(tmp_path, pg_database_url)
    setup.saga["sweep_interval"] = 0.5
    client = redis.Redis.from_url(setup.saga["broker_url"])
    logs = [tmp_path / "beat-a.log", tmp_path / "beat-b.log"]
    procs = []
    try:
        for log in logs:
            with open(log, "wb") as out:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "celery", "-A", "tasks", "beat", "--loglevel", "info"],
                        cwd=REPO,
                        env=setup.env(),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        wait_for(lambda: client.llen(setup.saga["queue"]) >= 4, 60, "a few sweeps to be sent")
        holders = [log for log in logs if b"Acquired lock" in log.read_bytes()]
        assert len(holders) == 1, [log.read_text()[-500:] for log in logs]
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        client.delete(setup.saga["queue"])
        for key in client.scan_iter(f"saga:redbeat:{setup.saga['queue']}*"):
            client.delete(key)
        client.close()


def test_a_dry_run_that_is_not_a_boolean_or_a_task_id_too_long_is_refused_before_the_tombstone(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.bad_inputs_are_refused_before_the_tombstone(running, *parts, run_id)


def test_a_record_with_an_unknown_status_fails_the_unwind_closed_and_the_caller_is_told(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.unknown_record_status_fails_closed(running, *parts, run_id)


def test_worker_log_stored_task_result_and_the_conf_flower_shows_hold_no_password(
    tmp_path: Path, workers: Workers
) -> None:
    """Issue 10, item 5, on a real worker: a journal URL that does not parse, with a password, fails
    the task; neither the caller's exception, nor the result stored in Redis, nor the worker's log,
    nor the conf the worker answers Flower with (`inspect conf`, its redbeat_redis_url) holds it."""
    require("redis")
    secret = "s3cret-Pa55"
    url = REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}"
    setup = make_setup(
        tmp_path,
        broker_url=url,
        result_backend=url,
        # Redis's default user has no password and so accepts any: the worker still reaches it.
        redis_url=url.replace("redis://", f"redis://default:{secret}@", 1),
        journal_url=f"postgres ql://saga:{secret}@127.0.0.1/journal",  # a space: it does not parse
    )
    worker = workers.start(setup, concurrency=1)
    client = setup.client()
    try:
        result = client.signature("saga.compensate_run").delay("order-1")
        with pytest.raises(Exception, match="cannot open journal") as failed:
            result.get(timeout=60)
        assert secret not in str(failed.value)
        stored = redis.Redis.from_url(url).get(f"celery-task-meta-{result.id}")
        assert stored is not None and b"cannot open journal" in stored and secret.encode() not in stored
        answers = client.control.inspect(timeout=10).conf(with_defaults=True)
        assert answers and all("redbeat_redis_url" in conf for conf in answers.values())
        assert secret not in json.dumps(answers, default=str)
    finally:
        client.close()
    worker.stop()
    assert b"cannot open journal" in worker.log.read_bytes()
    assert secret.encode() not in worker.log.read_bytes()


class StrayFaultsWorker(Worker):
    """A plain `celery -A saga_worker.celery:app worker` with extra variables in its environment."""

    def __init__(self, setup: Setup, log: Path, extra: dict[str, str]) -> None:
        WorkerProcess.__init__(
            self,
            ["celery", "-A", "saga_worker.celery:app", "worker"],
            {**setup.env(), **extra},
            log,
            concurrency=1,
            beat=False,
        )


def test_a_stray_saga_faults_variable_cannot_arm_a_production_worker(
    tmp_path: Path, workers: Workers, pg_url: str, run_id: str
) -> None:
    """Issue 11: fault points are enabled only by the test harness's own entry points; a plain
    worker started with SAGA_FAULTS (and a SAGA_FAULTS_DIR rule) set is killed at no point."""
    setup = redis_setup(tmp_path, pg_url)
    rules = tmp_path / "fault-rules"
    rules.mkdir()
    (rules / "before_hook").write_text("before_hook=kill")
    every_point = ",".join(
        f"{p}=kill" for p in ("after_claim", "before_hook", "after_hook", "after_outcome", "before_ack")
    )
    worker = StrayFaultsWorker(
        setup, tmp_path / "stray.log", {"SAGA_FAULTS": every_point, "SAGA_FAULTS_DIR": str(rules)}
    )
    workers.started.append(worker)
    worker.wait_ready()
    client, journal, ledger = setup.client(), setup.journal(), setup.ledger()
    try:
        scenarios.place_order(journal, ledger, run_id)
        report = scenarios.unwind(client, run_id)
        assert scenarios.statuses(report) == ["compensated"] * 3
        assert worker.proc.poll() is None  # still alive
        assert sorted(p.name for p in rules.iterdir()) == ["before_hook"]  # never read, never fired
    finally:
        ledger.close()
        journal.close()
        client.close()


MEGABYTE = 1_000_000


def test_a_megabyte_id_reason_or_error_text_is_answered_acknowledged_and_the_worker_serves_the_next_unwind(
    tmp_path: Path, pg_database_url: str, workers: Workers, run_id: str
) -> None:
    """Issue 21, item 5: one worker process; messages it can never process are answered with a stored
    error and acknowledged (nothing left to come back), and the unwinds behind them are served."""
    setup = redis_setup(tmp_path, pg_database_url)
    workers.start(setup, concurrency=1)
    client, journal, ledger = setup.client(), setup.journal(), setup.ledger()
    broker = redis.Redis.from_url(setup.saga["broker_url"])
    try:
        huge_id = client.send_task("saga.compensate_run", args=["a" * MEGABYTE])
        huge_reason = client.send_task(
            "saga.compensate_run", args=[run_id], kwargs={"reason": "r" * MEGABYTE}
        )
        long_id = client.send_task("saga.compensate_run", args=["b" * 50_000])  # under the size bound
        for refused in (huge_id, huge_reason):
            with pytest.raises(
                Exception, match="carries ids only, its body and headers are .* bytes"
            ) as failed:
                refused.get(timeout=60)
            assert len(str(failed.value)) < 400
        with pytest.raises(
            Exception, match=r"run id 'bbbb.*'… \(50000 characters\) cannot be used"
        ) as failed:
            long_id.get(timeout=60)
        assert len(str(failed.value)) < 600
        assert journal.get_run(run_id) is None  # the refused reason condemned nothing

        scenarios.place_order(journal, ledger, run_id)
        fail = setup.control_file(run_id, "fail", "reserve", ": " + "z" * MEGABYTE)
        report = scenarios.unwind(client, run_id)
        assert scenarios.statuses(report) == ["compensated", "failed", "not-attempted"]
        error = report["entries"][1]["error"]
        assert "the provider refused the compensation: zzz" in error and len(error) < 9_000
        assert "characters cut]" in error

        fail.unlink()
        again = scenarios.unwind(client, run_id)  # the same worker, still serving
        assert scenarios.statuses(again) == ["already-compensated", "compensated", "compensated"]
        assert scenarios.compensations(ledger, run_id) == {s: 1 for s in scenarios.SUFFIXES}
        # Nothing of the refused messages waits to be delivered again: not queued, not unacked.
        assert broker.llen(setup.saga["queue"]) == 0
        wait_for(
            lambda: all(t.id.encode() not in unacked(broker) for t in (huge_id, huge_reason, long_id)),
            30,
            "the refused messages' acknowledgements",
        )
    finally:
        broker.close()
        ledger.close()
        journal.close()
        client.close()


def test_an_unwind_on_a_read_only_journal_is_retried_saying_why_and_completes_once_it_is_writable(
    tmp_path: Path, workers: Workers, read_only_pg_url: tuple[str, Callable[[bool], None]], run_id: str
) -> None:
    """Issue 43: a read-only database (a standby) is a JournalUnavailableError naming the fix, which
    the saga tasks retry with backoff: once the journal is writable again the same unwind completes."""
    url, read_only = read_only_pg_url
    setup = redis_setup(tmp_path, url)
    journal, ledger = setup.journal(), setup.ledger()
    try:
        scenarios.place_order(journal, ledger, run_id)
    finally:
        ledger.close()
        journal.close()
    read_only(True)
    workers.start(setup, concurrency=1)
    client = setup.client()
    try:
        sent = client.send_task("saga.compensate_run", args=[run_id])
        wait_for(lambda: sent.state in ("RETRY", "FAILURE"), 60, "the unwind to fail or be retried")
        assert sent.state == "RETRY", sent.info
        assert "the database is read-only" in str(sent.info) and "SAGA_JOURNAL_URL" in str(sent.info)
        read_only(False)
        report = sent.get(timeout=120)
        assert scenarios.statuses(report) == ["compensated"] * 3
    finally:
        client.close()


@pytest.mark.parametrize("field", ["unwind_id", "suffix", "task_id"])
def test_a_step_message_with_a_nul_in_an_id_ends_with_the_check_that_refused_it_not_the_drivers_text(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str, field: str
) -> None:
    """Issue 43: a NUL in a step message's unwind id, step or task id (PostgreSQL text takes none; a
    redelivery's count is keyed by the task id) is refused by the checks before the journal is
    touched: FAILURE naming the id, no hook called."""
    client, journal, ledger = parts
    scenarios.place_order(journal, ledger, run_id)
    ids = {"unwind_id": f"u-{run_id}", "suffix": "call-1", "task_id": f"step-{run_id}"}
    ids[field] += "\x00"
    sent = client.send_task(
        "saga.compensate_step", args=[run_id, ids["unwind_id"], ids["suffix"]], task_id=ids["task_id"]
    )
    with pytest.raises(Exception, match=r"1-\d+ printable characters") as refused:
        sent.get(timeout=60)
    assert "NUL (0x00)" not in str(refused.value) and "DataError" not in repr(refused.value)
    assert set(scenarios.compensations(ledger, run_id).values()) == {0}  # no hook called


@pytest.mark.parametrize("header", ["baggage", "traceparent"])
def test_a_saga_message_whose_headers_pass_the_size_limit_is_refused_acknowledged_and_condemns_nothing(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str, header: str
) -> None:
    """Issue 43: the size limit counts a message's headers as well as its body; a megabyte of tracing
    header on a small body is refused on receipt, stored as the task's error, acknowledged, and the
    run stays as it was (the same unwind, sent plainly, then runs)."""
    client, journal, ledger = parts
    scenarios.place_order(journal, ledger, run_id)
    broker = redis.Redis.from_url(running.saga["broker_url"])
    try:
        sent = client.send_task("saga.compensate_run", args=[run_id], headers={header: "k=" + "v" * MEGABYTE})
        with pytest.raises(Exception, match=r"its body and headers are \d+ bytes \(at most 65536\)") as got:
            sent.get(timeout=60)
        assert "refused, nothing was done" in str(got.value) and len(str(got.value)) < 400
        run = journal.get_run(run_id)
        assert run is not None and not run.condemned
        # Celery stores a task's error before it acknowledges the message: wait for the ack itself.
        wait_for(lambda: sent.id.encode() not in unacked(broker), 30, "the refused message's acknowledgement")
        assert broker.llen(running.saga["queue"]) == 0
        report = scenarios.unwind(client, run_id)
        assert scenarios.statuses(report) == ["compensated"] * 3
    finally:
        broker.close()


def test_a_saga_message_whose_json_body_cannot_be_decoded_ends_acked_with_a_stored_error_and_a_log_line(
    tmp_path: Path, pg_database_url: str, workers: Workers, run_id: str
) -> None:
    """A body that is not JSON although it says so: the worker answers under the message's task id
    (FAILURE naming what was wrong), logs it, acknowledges it and serves the unwind behind it."""
    setup = redis_setup(tmp_path, pg_database_url)
    worker = workers.start(setup, concurrency=1)
    client, journal, ledger = setup.client(), setup.journal(), setup.ledger()
    broker = redis.Redis.from_url(setup.saga["broker_url"])
    task_id = f"undecodable-{run_id}"
    try:
        with client.producer_or_acquire() as producer:
            producer.publish(
                b'[["order-1"], {"dry_run": fal',  # cut short: not JSON
                routing_key=setup.saga["queue"],
                content_type="application/json",
                content_encoding="utf-8",
                headers={
                    "task": "saga.compensate_run",
                    "id": task_id,
                    "lang": "py",
                    "argsrepr": "",
                    "kwargsrepr": "",
                },
            )
        with pytest.raises(Exception, match="saga.compensate_run.*body is not valid JSON.*refused") as failed:
            client.AsyncResult(task_id).get(timeout=60)
        assert len(str(failed.value)) < 600

        scenarios.place_order(journal, ledger, run_id)
        report = scenarios.unwind(client, run_id)  # the same worker, still serving
        assert scenarios.statuses(report) == ["compensated"] * len(scenarios.SUFFIXES)
        assert broker.llen(setup.saga["queue"]) == 0
        wait_for(lambda: task_id.encode() not in unacked(broker), 30, "the refused message's acknowledgement")
        log = worker.log.read_text(errors="replace")
        assert f"saga.compensate_run [{task_id}]" in log and "body is not valid JSON" in log
    finally:
        broker.close()
        ledger.close()
        journal.close()
        client.close()
