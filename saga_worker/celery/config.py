"""The Celery configuration, built from :class:`SagaSettings` (docs/reference/celery.md).

Delivery is at-least-once and the tasks are written for it: messages carry ids only (JSON, nothing
else accepted), a message is acked after its task ends (``task_acks_late``) and handed back if the
pool child running it dies (``task_reject_on_worker_lost``), and each worker process holds one
message at a time. On Redis, an unacked message whose worker died comes back after
``visibility_timeout`` (which must exceed the longest step), found within a second or two by
kombu's periodic restore sweep. The embedded SQLite broker has no visibility timeout: there the
beat sweeper finishes a run whose worker was killed.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from ..core.checks import check_age
from ..core.redact import redact_url
from ..settings import SagaSettings, get_settings

SQLA_POLL_INTERVAL_S = 0.05
SWEEP_TASK = "saga.retry_uncertain"
SWEEP_ENTRY = "saga-retry-uncertain"
PRUNE_TASK = "saga.prune"
PRUNE_ENTRY = "saga-prune"


def is_redis(url: str) -> bool:
    return url.startswith(("redis://", "rediss://", "redis+socket://"))


def celery_config(settings: SagaSettings | None = None) -> dict[str, Any]:
    s = settings if settings is not None else get_settings()
    broker = s.resolved_broker_url()
    conf: dict[str, Any] = {
        "broker_url": broker,
        "result_backend": s.resolved_result_backend(),
        "task_serializer": "json",
        "result_serializer": "json",
        "event_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_default_queue": s.queue,
        "broker_connection_retry_on_startup": True,
        "enable_utc": True,
        "timezone": "UTC",
        # Celery's defaults, kept on purpose: no STARTED state written per task (a Redis
        # write and a publish on every step; nothing reads it: the report is the result), and task
        # events only from a worker started with --events / -E, as Flower needs (docker-compose's
        # worker is): four publishes per task otherwise sent to nobody.
        "task_track_started": False,
        "worker_send_task_events": False,
        "task_send_sent_event": False,
        "beat_schedule": _beat_schedule(s),
        "beat_max_loop_interval": min(1.0, s.sweep_interval),  # also how fast an embedded beat stops
    }
    conf.update(_broker_options(broker, s))
    conf.update(_result_backend_options(s.resolved_result_backend()))
    conf.update(_beat_store(s))
    return conf


def _beat_schedule(s: SagaSettings) -> dict[str, Any]:
    return {SWEEP_ENTRY: sweep_entry(s), **prune_entries(s)}


def prune_entries(s: SagaSettings, *, queue: str | None = None) -> dict[str, Any]:
    """Retention's beat entry, only when ``SAGA_PRUNE_OLDER_THAN`` is set (off by default: the task is
    sent only where it was asked for, so older workers never receive it unasked)."""
    if s.prune_older_than is None:
        return {}
    check_age(s.prune_older_than, "SAGA_PRUNE_OLDER_THAN")  # refused at the start, not at every prune
    options: dict[str, Any] = {"expires": max(s.prune_interval, 1.0)}
    if queue is not None:
        options["queue"] = queue
    entry = {
        "task": PRUNE_TASK,
        "schedule": s.prune_interval,
        "args": (s.prune_older_than,),
        "options": options,
    }
    return {PRUNE_ENTRY: entry}


def sweep_entry(s: SagaSettings, *, queue: str | None = None) -> dict[str, Any]:
    """The sweeper's beat entry, for our app and for one ``install(app)`` adds it to (``queue``: where
    that app sends it, when its routes are its own)."""
    # A sweep that waited longer than two intervals is stale: the next one supersedes it.
    options: dict[str, Any] = {"expires": max(2 * s.sweep_interval, 1.0)}
    if queue is not None:
        options["queue"] = queue
    return {"task": SWEEP_TASK, "schedule": s.sweep_interval, "options": options}


def _broker_options(broker: str, s: SagaSettings) -> dict[str, Any]:
    """The transport options the broker's kind needs (none for others)."""
    if is_redis(broker):
        return {
            "broker_transport_options": {
                "visibility_timeout": s.visibility_timeout,
                "unacked_restore_interval": max(1, min(10, int(s.visibility_timeout / 10))),
                "unacked_restore_throttle": 1,
            }
        }
    if broker.startswith("sqla+"):
        # Passed to create_engine: a busy timeout, since several processes share the SQLite file.
        return {"broker_transport_options": {"connect_args": {"timeout": 30}}}
    return {}


def _result_backend_options(backend: str) -> dict[str, Any]:
    """Engine options for a database result backend (none for others)."""
    if not backend.startswith("db+"):
        return {}
    options = {"connect_args": {"timeout": 30}} if "sqlite" in backend else {"pool_pre_ping": True}
    return {"database_engine_options": options}


def _beat_store(s: SagaSettings) -> dict[str, Any]:
    """Where beat keeps its schedule: RedBeat in Redis when there is one, else a file in ``home``."""
    if not s.redis_url:
        return {"beat_schedule_filename": str((s.home / "beat-schedule").resolve())}
    return {
        # One scheduler however many beat processes run: RedBeat holds a lock in Redis.
        "beat_scheduler": "saga_worker.celery.beat:ResilientRedBeatScheduler",
        # The conf is what a worker shows Flower (and `celery inspect conf`), and Celery censors only
        # the settings it knows: the conf holds the URL redacted, the scheduler connects with the real
        # one, kept out of the conf (beat.remember_redis_url).
        "redbeat_redis_url": redact_url(s.redis_url),
        "redbeat_key_prefix": f"saga:redbeat:{s.queue}",
        "redbeat_lock_timeout": max(30, int(5 * s.sweep_interval)),
    }


def _prepare(s: SagaSettings) -> None:
    if s.embedded or s.journal_url is None or s.result_backend is None:
        s.home.mkdir(parents=True, exist_ok=True)
    if s.resolved_broker_url().startswith("sqla+"):
        # kombu hands every transport option to create_engine (which rejects polling_interval), so the
        # poll interval is set on the transport class: 50 ms instead of 1 s per step task hand-off.
        from kombu.transport.sqlalchemy import Transport

        Transport.polling_interval = SQLA_POLL_INTERVAL_S


def make_app(settings: SagaSettings | None = None, *, main: str = "saga_worker") -> Celery:
    """saga-worker's own Celery app, configured from the settings, with the ``saga.*`` tasks on it,
    and what its workers do at their start connected (``worker_signals``)."""
    from . import worker_signals
    from .tasks import register

    s = settings if settings is not None else get_settings()
    _prepare(s)
    app = Celery(main, set_as_current=False)
    app.config_from_object(celery_config(s))
    if s.redis_url:
        from .beat import remember_redis_url

        remember_redis_url(app, s.redis_url)
    register(app)
    worker_signals.connect()
    return app


def prepare_stores(app: Celery) -> None:
    """Create the broker's and the result store's tables now (SQL transports and backends create them
    on first use), so a client and a starting worker never race to create the same SQLite tables."""
    if str(app.conf.broker_url).startswith("sqla+"):
        with app.connection_for_write() as conn:
            conn.default_channel  # noqa: B018 - opening the channel creates kombu's tables
    session_factory = getattr(app.backend, "ResultSession", None)
    if session_factory is not None:
        session_factory().close()
