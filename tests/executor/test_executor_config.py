"""Worker wiring without a broker: tools loaded from SAGA_TOOLS, lock selection, and the Celery
configuration each deployment gets from its settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from saga_worker import InvalidInputError, Tool, ToolsNotConfiguredError, executor
from saga_worker.celery import celery_config, make_app
from saga_worker.executor import WorkerContext, load_tools
from saga_worker.locks.redis import RedisStepLock
from saga_worker.settings import SagaSettings, get_settings

SAMPLE = {"noop": Tool(lambda i, o: None)}


def sample_factory() -> dict[str, Tool]:
    return SAMPLE


def test_tools_load_from_a_module_attribute_or_a_factory() -> None:
    assert set(load_tools("saga_worker.demo:TOOLS")) == {"charge", "reserve_stock", "send_email"}
    assert load_tools(f"{__name__}:sample_factory") == SAMPLE


@pytest.mark.parametrize(
    "spec, says",
    [
        ("saga_worker.contrib.demo", "package.module:attribute"),
        ("no_such_module_xyz:TOOLS", "cannot import"),
        ("saga_worker.demo:NOPE", "has no attribute"),
        ("saga_worker.demo:order_planner", "not a mapping"),
    ],
)
def test_a_bad_tools_setting_is_named_in_a_clear_error(spec: str, says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        load_tools(spec)


def test_a_context_with_no_tools_configured_refuses_rather_than_loading_sample_tools(tmp_path: Path) -> None:
    context = WorkerContext(SagaSettings(home=tmp_path))
    assert context.tools_source is None and context.tools_if_configured is None
    with pytest.raises(ToolsNotConfiguredError, match="no tools configured: set SAGA_TOOLS="):
        context.tools  # noqa: B018 - the property is the entry under test
    with pytest.raises(ToolsNotConfiguredError, match="^the dry run: no tools configured"):
        context.require_tools("the dry run")


def test_tools_named_by_spec_or_callable_load_on_first_use_not_before(tmp_path: Path) -> None:
    calls: list[int] = []

    def later() -> dict[str, Tool]:
        calls.append(1)
        return SAMPLE

    context = WorkerContext(SagaSettings(home=tmp_path), tools=later)
    assert calls == [] and context.tools_source is not None
    assert context.tools == SAMPLE and context.tools == SAMPLE and calls == [1]
    named = WorkerContext(SagaSettings(home=tmp_path), tools=f"{__name__}:sample_factory")
    assert named.tools_source == f"{__name__}:sample_factory" and named.tools == SAMPLE


def test_record_call_and_the_console_plan_refuse_without_tools(tmp_path: Path) -> None:
    from saga_worker import executor
    from saga_worker.celery import record_call
    from saga_worker.operating import actions

    executor.configure(SagaSettings(home=tmp_path, journal_url="memory://no-tools"))
    try:
        with pytest.raises(ToolsNotConfiguredError, match="^record_call: no tools configured"):
            record_call("order-1", "charge", {"amount": 5}, id="charge")
        context = WorkerContext(SagaSettings(home=tmp_path, journal_url="memory://no-tools"))
        with pytest.raises(ToolsNotConfiguredError, match="^the dry run: no tools configured"):
            actions.plan("order-1", context=context)
    finally:
        executor.configure(None, None)


def test_redis_url_selects_redis_step_locks_and_none_means_the_journal_claim_alone(tmp_path: Path) -> None:
    with_redis = WorkerContext(SagaSettings(home=tmp_path, redis_url="redis://127.0.0.1:6379/0"))
    assert isinstance(with_redis.lock, RedisStepLock)
    assert WorkerContext(SagaSettings(home=tmp_path)).lock is None


def test_every_deployment_acks_late_requeues_lost_work_and_accepts_json_only(tmp_path: Path) -> None:
    for settings in (
        SagaSettings(home=tmp_path),
        SagaSettings(home=tmp_path, broker_url="redis://127.0.0.1:6379/3"),
    ):
        conf = celery_config(settings)
        assert conf["task_acks_late"] and conf["task_reject_on_worker_lost"]
        assert conf["worker_prefetch_multiplier"] == 1
        assert conf["accept_content"] == ["json"] and conf["task_serializer"] == "json"
        assert conf["beat_schedule"]["saga-retry-uncertain"]["task"] == "saga.retry_uncertain"


def test_redis_broker_redelivers_a_dead_workers_message_after_the_visibility_timeout(tmp_path: Path) -> None:
    conf = celery_config(
        SagaSettings(
            home=tmp_path,
            broker_url="redis://127.0.0.1:6379/3",
            visibility_timeout=120,
            redis_url="redis://127.0.0.1:6379/3",
        )
    )
    options = conf["broker_transport_options"]
    assert options["visibility_timeout"] == 120
    assert options["unacked_restore_throttle"] == 1 and options["unacked_restore_interval"] <= 10
    assert (
        conf["beat_scheduler"] == "saga_worker.celery.beat:ResilientRedBeatScheduler"
    )  # one scheduler however many beats run


def test_embedded_default_polls_its_sqlite_broker_every_50_ms_without_passing_it_to_create_engine(
    tmp_path: Path,
) -> None:
    from kombu.transport.sqlalchemy import Transport

    settings = SagaSettings(home=tmp_path / "home")
    app = make_app(settings)
    assert app.conf.broker_url.startswith("sqla+sqlite:///")
    assert Transport.polling_interval == pytest.approx(0.05)
    assert "polling_interval" not in app.conf.broker_transport_options
    assert "beat_scheduler" not in celery_config(settings)
    assert (tmp_path / "home").is_dir()


@pytest.mark.parametrize(
    "spec, says",
    [
        (
            "json:dumps",
            "calling dumps with no arguments .* raised TypeError",
        ),  # a callable that is not a factory
        (f"{__name__}:bad_tools", "tools\\['bad'\\] must be a Tool"),  # a mapping of something else
        (f"{__name__}:broken_factory", "raised RuntimeError: no tools here"),
    ],
)
def test_every_error_of_a_bad_tools_setting_names_the_setting(spec: str, says: str) -> None:
    with pytest.raises(InvalidInputError, match=f"^SAGA_TOOLS={spec!r}: .*{says}"):
        load_tools(spec)


bad_tools = {"bad": "not a tool"}


def broken_factory() -> dict[str, object]:
    raise RuntimeError("no tools here")


def test_a_forked_pool_process_keeps_the_settings_its_worker_read_and_a_reset_reads_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool process's environment is its parent's: reading it again cost each one's first task."""
    monkeypatch.setenv("SAGA_HOME", str(tmp_path))
    monkeypatch.setenv("SAGA_CLAIM_TTL", "7")
    get_settings.cache_clear()
    try:
        read = executor.current().settings
        monkeypatch.setenv("SAGA_CLAIM_TTL", "9")
        executor.reset(after_fork=True)
        assert executor.current().settings is read and read.claim_ttl == 7
        executor.reset()
        assert executor.current().settings.claim_ttl == 9
    finally:
        executor.reset()
