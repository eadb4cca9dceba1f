"""``install(app)`` on a foreign app (no worker: what the app and its tasks are configured to do).
The same app with real workers is in tests/integration/test_celery_host_app.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from kombu.transport import virtual

import saga_worker.celery as saga_celery
from saga_worker import InvalidInputError, Tool, executor
from saga_worker.celery import NAMES, install
from saga_worker.celery.install import _set_installed
from saga_worker.settings import SagaSettings


@pytest.fixture
def host() -> Iterator[Celery]:
    app = Celery("host", set_as_current=False)
    app.conf.update(
        broker_url="memory://",
        result_backend="cache+memory://",
        task_serializer="pickle",
        accept_content=["pickle", "json"],
        task_default_queue="host",
        task_acks_late=False,
        task_routes={"host.*": {"queue": "host-special"}},
        beat_schedule={"host-tick": {"task": "host.tick", "schedule": 60}},
    )

    @app.task(name="host.tick", shared=False)
    def tick() -> str:
        return "tock"

    yield app
    _set_installed(None)
    executor.configure(None, None)


def settings(**kw: Any) -> SagaSettings:
    return SagaSettings(queue="saga-q", sweep_interval=7, **kw)


def test_install_registers_the_saga_tasks_with_what_they_rely_on_and_leaves_the_host_alone(
    host: Celery,
) -> None:
    registered = install(host, settings=settings())
    assert sorted(registered) == sorted(NAMES)
    for name in NAMES:
        task = host.tasks[name]
        assert (task.serializer, task.acks_late, task.reject_on_worker_lost, task.queue) == (  # type: ignore[attr-defined]  # not in celery-types' Task
            "json",
            True,
            True,
            "saga-q",
        )
        assert host.amqp.router.route({}, name)["queue"].name == "saga-q"
    # The host's own settings, tasks and routes are as they were.
    assert host.conf.task_serializer == "pickle" and host.conf.task_acks_late is False
    assert host.conf.broker_url == "memory://" and host.conf.result_backend == "cache+memory://"
    assert host.tasks["host.tick"].acks_late is False and host.tasks["host.tick"].serializer == "pickle"
    assert host.amqp.router.route({}, "host.tick")["queue"].name == "host-special"
    assert host.amqp.router.route({}, "other.task")["queue"].name == "host"
    assert set(host.conf.beat_schedule) == {"host-tick", "saga-retry-uncertain"}
    entry = host.conf.beat_schedule["saga-retry-uncertain"]
    assert entry["task"] == "saga.retry_uncertain" and entry["schedule"] == 7
    assert entry["options"]["queue"] == "saga-q"


def test_after_install_the_librarys_compensate_run_sends_through_the_host_app(host: Celery) -> None:
    install(host, settings=settings())
    assert saga_celery.compensate_run.app is host
    assert saga_celery.compensate_run.name == "saga.compensate_run"


def test_saga_broker_and_result_settings_when_set_say_otherwise(host: Celery) -> None:
    install(
        host,
        settings=settings(broker_url="redis://127.0.0.1:6379/9", result_backend="redis://127.0.0.1:6379/9"),
    )
    assert host.conf.broker_url == "redis://127.0.0.1:6379/9"
    assert host.conf.result_backend == "redis://127.0.0.1:6379/9"


def test_install_uses_the_tools_and_settings_it_is_given_in_the_worker_context(host: Celery) -> None:
    tools = {"noop": Tool(lambda i, o: None)}
    install(host, settings=settings(journal_url="memory://"), tools=tools)
    ctx = executor.current()
    assert ctx.settings.queue == "saga-q" and list(ctx.tools) == ["noop"]


def test_install_refuses_an_app_that_accepts_no_json_and_what_is_not_an_app() -> None:
    pickle_only = Celery("p", set_as_current=False)
    pickle_only.conf.accept_content = ["pickle"]
    with pytest.raises(InvalidInputError, match="accept_content"):
        install(pickle_only, settings=settings())
    with pytest.raises(InvalidInputError, match="Celery app"):
        install(object())  # type: ignore[arg-type]  # the wrong type is the point


def test_a_saga_task_sent_by_name_from_a_pickle_app_goes_out_as_json_on_the_saga_queue(host: Celery) -> None:
    install(host, settings=settings(), beat=False)
    host.send_task("saga.compensate_run", args=["order-7"])  # the host's task_serializer is pickle
    with host.connection_for_write() as conn:
        channel = conn.default_channel
        assert isinstance(channel, virtual.Channel)  # the memory transport's
        message = channel.basic_get("saga-q")  # raw: nothing decoded here
    assert message is not None
    assert message.content_type == "application/json"
    assert message.body is not None and json.loads(message.body)[0] == ["order-7"]


def test_beat_prunes_only_when_an_age_is_set_and_the_task_prunes_what_db_prune_would(
    host: Celery, tmp_path: Any
) -> None:
    install(host, settings=settings())
    assert "saga-prune" not in host.conf.beat_schedule  # off by default: the task is never sent unasked
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    install(host, settings=settings(journal_url=url, prune_older_than="1s", prune_interval=600))
    entry = host.conf.beat_schedule["saga-prune"]
    assert (entry["task"], entry["schedule"], entry["args"]) == ("saga.prune", 600, ("1s",))
    from saga_worker import open_journal, run_durable, scripted

    with open_journal(url) as journal:
        run_durable("old", journal=journal, tools={}, planner=scripted(final="done"))
        import time

        time.sleep(1.1)
        run_durable("new", journal=journal, tools={}, planner=scripted(final="done"))
        summary = host.tasks["saga.prune"].apply(args=("1s",)).get()
        assert summary["pruned"] == 1
        assert journal.get_run("old").pruned and not journal.get_run("new").pruned  # type: ignore[union-attr]


def test_an_age_beat_cannot_read_is_refused_when_the_app_is_configured(host: Celery) -> None:
    with pytest.raises(InvalidInputError, match="SAGA_PRUNE_OLDER_THAN must be an age"):
        install(host, settings=settings(prune_older_than="ninety days"))
