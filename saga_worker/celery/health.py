"""The fleet's health as the console's header and ``saga-worker status`` show it: which workers
consume the saga queue, how many messages wait in it, and when beat last swept.

Each sweep (``saga.retry_uncertain``) stores when it ran in the result backend under an id named by
the deployment's queue (``last_sweep_id``: deployments sharing a result backend keep theirs apart), so
any process with the deployment's settings reads it back. Beat is overdue
when its last sweep is more than ``OVERDUE_INTERVALS`` sweep intervals old (or none is stored): with
a broker, beat is a process of its own, and when it is not running nothing is re-driven and nothing
else says so. Overdue is shown red, logged (once per change) and counted as ``saga_beat_overdue``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from amqp.exceptions import ChannelError
from celery import Celery, states
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..observing import quietly
from ..operating.actions import Workers
from ..operating.display import iso
from ..settings import SagaSettings

log = logging.getLogger(__name__)


def last_sweep_id(queue: str) -> str:
    """The result backend's id of the last sweep of the deployment whose saga queue is ``queue``."""
    return f"saga-beat-last-sweep:{queue}"


# Its state: not SUCCESS, which Celery's result backends never overwrite (each sweep must; a final
# state found there, written by anything else, is forgotten first).
SWEPT = "SWEPT"
OVERDUE_INTERVALS = 3

Health = Callable[[], "dict[str, Any] | None"]


def note_sweep(app: Celery, queue: str, outcome: dict[str, list[str]]) -> None:
    """Store that a sweep of the deployment on ``queue`` ran now (and what it did), for
    ``last_sweep``; never raises into the sweep."""
    with quietly("noting the sweep in the result backend"):
        swept = {"swept_at": time.time(), **{k: len(v) for k, v in outcome.items()}}
        task_id = last_sweep_id(queue)
        if app.backend.get_task_meta(task_id, cache=False).get("status") in states.READY_STATES:
            app.backend.forget(task_id)
        app.backend.store_result(task_id, swept, SWEPT)


def last_sweep(app: Celery, queue: str) -> float | None:
    """When beat's sweeper of the deployment on ``queue`` last ran, as the result backend has it
    (None: never, or unknown)."""
    try:
        meta = app.backend.get_task_meta(last_sweep_id(queue), cache=False)
    except Exception:  # noqa: BLE001 - no result backend, or it is down: unknown, not an error page
        log.debug("cannot read the last sweep", exc_info=True)
        return None
    result = meta.get("result") if meta.get("status") == SWEPT else None
    swept = result.get("swept_at") if isinstance(result, dict) else None
    return float(swept) if isinstance(swept, (int, float)) else None


def queue_depth(app: Celery, queue: str) -> int | None:
    """Messages waiting in ``queue`` (not yet taken by a worker), or None when the broker cannot tell."""
    try:
        with app.connection_for_read() as connection:
            channel: Any = connection.default_channel  # kombu's channels all declare (typed as StdChannel)
            try:
                declared = channel.queue_declare(queue=queue, passive=True)
            except ChannelError as exc:
                # No such queue: nothing waits in it (Redis keeps no empty list; RabbitMQ has not
                # declared it yet, as before any worker or message).
                if str(getattr(exc, "reply_code", "")) == "404":  # kombu's virtual transports: "404"
                    return 0
                raise
            return int(declared.message_count)
    except Exception:  # noqa: BLE001 - a queue not declared yet, a broker down: unknown
        log.debug("cannot read the depth of queue %s", queue, exc_info=True)
        return None


_overdue_said: dict[str, bool] = {}


def beat_state(swept: float | None, interval: float, now: float) -> dict[str, Any]:
    """Whether beat is overdue, by its last sweep and the sweep interval; says so in the log once per
    change (ERROR when it turns overdue, INFO when it is back)."""
    age = None if swept is None else max(0.0, now - swept)
    overdue = age is None or age > OVERDUE_INTERVALS * interval
    before = _overdue_said.get("beat")
    if before is not overdue:
        _overdue_said["beat"] = overdue
        with quietly("logging the beat's state"):
            if overdue:
                log.error(
                    "beat is overdue: %s (sweep interval %.0f s); nothing re-drives interrupted unwinds "
                    "until `saga-worker beat` runs",
                    "no sweep recorded" if age is None else f"last sweep {age:.0f} s ago",
                    interval,
                )
            elif before is True:
                log.info("beat sweeps again (last sweep %.0f s ago)", age or 0.0)
    return {
        "last_sweep_at": swept,
        "last_sweep_iso": iso(swept),
        "last_sweep_age_s": None if age is None else round(age, 1),
        "sweep_interval_s": interval,
        "overdue_after_s": OVERDUE_INTERVALS * interval,
        "overdue": overdue,
    }


def fleet_health(app: Celery, settings: SagaSettings, workers: Workers) -> dict[str, Any]:
    """The fleet as an operator checks it: the workers consuming the saga queue (None: the broker
    cannot tell, as the embedded SQLite broker), the queue's depth, and beat's last sweep."""
    alive = workers()
    return {
        "queue": settings.queue,
        "workers": alive,
        "queue_depth": queue_depth(app, settings.queue),
        "beat": beat_state(last_sweep(app, settings.queue), settings.sweep_interval, time.time()),
    }


class BeatCollector(Collector):
    """``saga_beat_last_sweep_age_seconds`` and ``saga_beat_overdue`` (1 when beat's last sweep is more
    than three sweep intervals old, or none is recorded), read at scrape time."""

    def __init__(self, app: Celery, settings: SagaSettings) -> None:
        self._app, self._settings = app, settings

    def collect(self) -> Iterator[GaugeMetricFamily]:
        age = GaugeMetricFamily(
            "saga_beat_last_sweep_age_seconds", "Seconds since beat's sweeper last ran (-1: none recorded)."
        )
        overdue = GaugeMetricFamily(
            "saga_beat_overdue", "1 when beat's last sweep is more than three sweep intervals old, else 0."
        )
        try:
            state = beat_state(
                last_sweep(self._app, self._settings.queue), self._settings.sweep_interval, time.time()
            )
            seconds = state["last_sweep_age_s"]
            age.add_metric([], -1.0 if seconds is None else float(seconds))
            overdue.add_metric([], 1.0 if state["overdue"] else 0.0)
        except Exception:  # a backend that cannot be read must not break the scrape of the rest
            log.warning("cannot read beat's last sweep", exc_info=True)
            return
        yield age
        yield overdue


__all__ = [
    "OVERDUE_INTERVALS",
    "BeatCollector",
    "Health",
    "beat_state",
    "fleet_health",
    "last_sweep",
    "last_sweep_id",
    "note_sweep",
    "queue_depth",
]
