"""The distributed executor with RabbitMQ as broker (results in Redis, a SQLite journal, no Redis
locks: the journal claim alone decides)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import amqp
import pytest
from celery import Celery

from saga_worker import Journal
from saga_worker.core.keys import compensate_key
from tests.ledger import Ledger
from tests.services import AMQP_URL, REDIS_URL, require

from . import scenarios
from .conftest import Setup, Workers, make_setup, redis_db

pytestmark = [pytest.mark.celery, pytest.mark.rabbitmq, pytest.mark.redis, pytest.mark.slow]


def rabbit_setup(tmp: Path) -> Setup:
    require("rabbitmq")
    require("redis")
    results = REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}"
    setup = make_setup(
        tmp, broker_url=AMQP_URL, result_backend=results, journal_url=f"sqlite:///{tmp / 'journal.db'}"
    )
    setup.journal().close()
    return setup


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, module_workers: Workers) -> Iterator[Setup]:
    setup = rabbit_setup(tmp_path_factory.mktemp("rabbit"))
    module_workers.start(setup, concurrency=2)
    yield setup
    _delete_queue(setup)


def _delete_queue(setup: Setup) -> None:
    client = setup.client()
    with client.connection_for_write() as conn:
        channel = conn.default_channel
        assert isinstance(channel, amqp.Channel)  # py-amqp's, under kombu's pyamqp transport
        channel.queue_delete(setup.saga["queue"])
    client.close()


@pytest.fixture
def parts(running: Setup) -> Iterator[tuple[Celery, Journal, Ledger]]:
    client, journal, ledger = running.client(), running.journal(), running.ledger()
    yield client, journal, ledger
    ledger.close()
    journal.close()
    client.close()


def test_rabbitmq_report_over_celery_equals_the_library_report_for_the_same_journal_state(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.report_equals_the_library_report(running, *parts, run_id)


def test_rabbitmq_failing_step_halts_the_chain_with_a_report(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.failing_step_halts_with_a_report(running, *parts, run_id)


def test_rabbitmq_task_sent_by_name_unwinds_the_run(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.task_sent_by_name_returns_the_report(running, *parts, run_id)


def test_rabbitmq_two_delay_calls_for_one_run_at_once_compensate_every_step_exactly_once(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.two_unwinds_at_once_compensate_each_step_once(running, *parts, run_id)


def test_rabbitmq_pool_child_killed_mid_hook_is_redelivered_and_compensated_once_with_the_same_key(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    scenarios.place_order(journal, ledger, run_id)
    running.control_file(run_id, "kill", "reserve")
    report = scenarios.unwind(client, run_id)
    assert scenarios.statuses(report) == ["compensated"] * 3
    assert scenarios.compensations(ledger, run_id) == {s: 1 for s in scenarios.SUFFIXES}
    assert ledger.call_counts("start:reserve")[compensate_key(run_id, "call-2")] == 2


def test_rabbitmq_a_hook_that_kills_its_worker_every_time_is_answered_after_max_deliveries(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    # RabbitMQ marks a message it hands back as redelivered itself. The worker takes one message per
    # process (prefetch 1), so serving the next unwind shows the refused step's message was acked.
    scenarios.hook_that_kills_its_worker_every_time(running, *parts, run_id, acked=lambda: None)
