"""saga-worker installed on a foreign Celery app (tests/integration/host_app.py) with real workers on
Redis (the host's broker and results, and the step locks) and a PostgreSQL journal: the host's own
tasks keep their settings, the saga tasks obey theirs, and a chain of the host's forward tasks across
two worker processes builds one run that ``compensate_run.delay`` unwinds."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, group
from celery.result import AsyncResult

import saga_worker.celery as saga_celery
from saga_worker import Journal, executor
from saga_worker.celery.install import _set_installed
from saga_worker.journal.records import RunStatus
from saga_worker.settings import get_settings
from tests.ledger import Ledger
from tests.services import REDIS_URL, require
from tests.worker_process import WorkerProcess

from .conftest import READY_TIMEOUT_S, Setup, make_setup, redis_db, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]
TIMEOUT = 60


class Host:
    def __init__(self, setup: Setup, app: Celery, env: dict[str, str], queue: str, logs: list[Path]) -> None:
        self.setup, self.app, self.env, self.queue, self.logs = setup, app, env, queue, logs


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, pg_database_url: str) -> Iterator[Host]:
    require("redis")
    tmp = tmp_path_factory.mktemp("host")
    url = REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}"
    setup = make_setup(tmp, journal_url=pg_database_url, redis_url=url)  # no SAGA_BROKER_URL: the host's
    queue = f"host-{uuid.uuid4().hex[:8]}"
    env = dict(setup.env(), HOST_BROKER_URL=url, HOST_RESULT_BACKEND=url, HOST_QUEUE=queue)
    env["C_FORCE_ROOT"] = "1"  # the host accepts pickle, and test machines may run as root
    mp = pytest.MonkeyPatch()
    for key, value in env.items():
        if key.startswith(("SAGA_", "HOST_")):
            mp.setenv(key, value)
    get_settings.cache_clear()
    from tests.integration.host_app import make_host_app

    app = make_host_app()
    procs = [
        WorkerProcess(
            [
                "celery",
                "-A",
                "tests.integration.host_app",
                "worker",
                "-Q",
                f"{queue}-{side},{setup.saga['queue']}",
            ],
            env,
            tmp / f"host-worker-{side}.log",
            concurrency=1,
            beat=False,
            name=f"host-{side}-",
        )
        for side in ("a", "b")
    ]
    try:
        for proc in procs:
            wait_for(proc.ready, READY_TIMEOUT_S, f"host worker to be ready:\n{proc.tail()}")
        yield Host(setup, app, env, queue, [proc.log for proc in procs])
    finally:
        for proc in procs:
            proc.stop()
        app.close()
        _set_installed(None)
        executor.configure(None, None)
        mp.undo()
        get_settings.cache_clear()


@pytest.fixture
def parts(host: Host) -> Iterator[tuple[Journal, Ledger]]:
    journal, ledger = host.setup.journal(), host.setup.ledger()
    yield journal, ledger
    ledger.close()
    journal.close()


def test_the_hosts_own_tasks_keep_their_settings_on_the_same_workers(host: Host) -> None:
    union = host.app.tasks["host.union"]
    assert union.apply_async(({1, 2}, {3}), queue=f"{host.queue}-a").get(timeout=TIMEOUT) == {1, 2, 3}


def test_a_host_task_failing_with_a_megabyte_token_is_logged_as_written_and_its_worker_serves_on(
    host: Host,
) -> None:
    queue = f"{host.queue}-a"
    failed = host.app.tasks["host.fail"].apply_async((1_000_000,), queue=queue)
    with pytest.raises(ValueError, match="upstream said token=aaa"):
        failed.get(timeout=TIMEOUT)
    union = host.app.tasks["host.union"]
    assert union.apply_async(({1}, {2}), queue=queue).get(timeout=TIMEOUT) == {1, 2}
    # The host's record is none of saga-worker's: its log line is as the host wrote it.
    logs = b"".join(p.read_bytes() for p in host.logs)
    assert b"and postgresql://u:p@h/db" in logs


def test_a_chain_of_forward_tasks_on_two_workers_builds_one_run_that_compensate_run_delay_unwinds(
    host: Host, parts: tuple[Journal, Ledger], run_id: str
) -> None:
    journal, ledger = parts
    sig = host.app.signature
    steps = [("charge", {"amount": 10}, "a"), ("reserve", {"sku": "A1"}, "b"), ("notify", {"to": "c@x"}, "a")]
    chain = sig(f"host.{steps[0][0]}", (run_id, steps[0][1]), immutable=True, queue=f"{host.queue}-a")
    for name, input, side in steps[1:]:
        chain = chain | sig(f"host.{name}", (run_id, input), immutable=True, queue=f"{host.queue}-{side}")
    last = chain.apply_async()
    assert isinstance(last, AsyncResult)
    results: list[dict[str, Any]] = [last.get(timeout=TIMEOUT)]
    node = last.parent
    while node is not None:
        assert isinstance(node, AsyncResult)
        results.insert(0, node.get(timeout=TIMEOUT))
        node = node.parent
    assert len({r["worker"] for r in results}) == 2  # the run was built by two worker processes
    records = journal.list_records(run_id)
    assert [(r.tool_call_id, r.tool_name) for r in records] == [(s[0], s[0]) for s in steps]
    assert [r.seq for r in records] == sorted(r.seq for r in records)
    info = journal.get_run(run_id)
    assert info is not None and info.status is RunStatus.FINISHED and info.prompt == "host order"
    assert len(journal.list_decisions(run_id)) == 4  # three calls and the finish, as a scripted run

    report = saga_celery.compensate_run.delay(run_id).get(timeout=TIMEOUT)
    assert [(e["tool_name"], e["status"]) for e in report["entries"]] == [
        ("notify", "compensated"),
        ("reserve", "compensated"),
        ("charge", "compensated"),
    ]
    mine = {k: n for k, n in ledger.effect_counts().items() if k.startswith(f"{run_id}:")}  # UNIQUE per key
    assert mine == {f"{run_id}:{s[0]}": 1 for s in steps} | {f"{run_id}:comp:{s[0]}": 1 for s in steps}
    raw = ledger.call_counts("execute") + ledger.call_counts("compensate")
    assert {k: n for k, n in raw.items() if k.startswith(f"{run_id}:")} == mine


def test_forward_tasks_of_one_celery_group_are_one_group_that_a_parallel_unwind_undoes_after_later_calls(
    host: Host, parts: tuple[Journal, Ledger], run_id: str
) -> None:
    journal, ledger = parts
    sig = host.app.signature
    sig("host.charge", (run_id, {"amount": 10}), queue=f"{host.queue}-a").apply_async().get(timeout=TIMEOUT)
    together = group(
        sig("host.reserve.grouped", (run_id, {"sku": "A1"}), queue=f"{host.queue}-a"),
        sig("host.notify.grouped", (run_id, {"to": "c@x"}), queue=f"{host.queue}-b"),
    )
    together.apply_async().get(timeout=TIMEOUT)

    report = saga_celery.compensate_run.delay(run_id, parallel=True).get(timeout=TIMEOUT)
    rows = [(e["group"], e["tool_name"], e["status"]) for e in report["entries"]]
    assert sorted(rows[:2]) == [(2, "notify", "compensated"), (2, "reserve", "compensated")]
    assert rows[2:] == [(1, "charge", "compensated")]
    compensations = ledger.effect_counts("compensate")
    assert {k: n for k, n in compensations.items() if k.startswith(f"{run_id}:")} == {
        f"{run_id}:comp:{name}": 1 for name in ("charge", "reserve", "notify")
    }


def test_a_forward_task_sent_again_replays_its_call_instead_of_executing_it_twice(
    host: Host, parts: tuple[Journal, Ledger], run_id: str
) -> None:
    journal, ledger = parts
    charge = host.app.tasks["host.charge"]
    first = charge.apply_async((run_id, {"amount": 5}), queue=f"{host.queue}-a").get(timeout=TIMEOUT)
    again = charge.apply_async((run_id, {"amount": 5}), queue=f"{host.queue}-b").get(timeout=TIMEOUT)
    assert first["output"] == again["output"]
    assert {k: n for k, n in ledger.call_counts("execute").items() if k.startswith(run_id)} == {
        f"{run_id}:charge": 1
    }


def test_a_saga_task_refuses_a_message_that_is_not_json_and_condemns_nothing(
    host: Host, parts: tuple[Journal, Ledger], run_id: str
) -> None:
    journal, _ = parts
    pickled = host.app.send_task("saga.compensate_run", args=[run_id], serializer="pickle")
    with pytest.raises(Exception, match="JSON messages only"):
        pickled.get(timeout=TIMEOUT)
    info = journal.get_run(run_id)
    assert info is None or not info.condemned


def test_the_saga_tasks_run_on_the_saga_queue_not_the_hosts_default(host: Host, run_id: str) -> None:
    # Neither worker consumes the host's default queue: a saga task that landed there would never run.
    report = host.app.send_task("saga.compensate_run", args=[run_id]).get(timeout=TIMEOUT)
    assert report["run_id"] == run_id and report["condemned"] is True
