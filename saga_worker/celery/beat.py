"""A RedBeat scheduler that outlives a Redis restart.

Stock RedBeat lets a Redis error escape ``tick``: the embedded beat process dies and the sweeper
(``saga.retry_uncertain``) is gone until someone restarts it, so a run whose messages were lost
with a Redis that kept nothing is never re-driven. This one treats Redis errors as a pause: it
retries every second, takes its lock back (or stands by while another beat holds it), and
re-installs the schedule when a restart without persistence has wiped it.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

import redis
from celery import Celery
from redbeat.schedulers import RedBeatScheduler, ensure_conf, get_redis

from ..settings import get_settings

log = logging.getLogger(__name__)
REDIS_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.LockError)
RETRY_S = 1.0


# The Redis URL each app's beat connects with, kept out of the app's conf (which holds it redacted,
# for display: a worker shows its conf to Flower).
_REDIS_URLS: weakref.WeakKeyDictionary[Celery, str] = weakref.WeakKeyDictionary()


def remember_redis_url(app: Celery, url: str) -> None:
    _REDIS_URLS[app] = url


class ResilientRedBeatScheduler(RedBeatScheduler):  # type: ignore[misc]
    def __init__(self, app: Celery, *args: Any, **kwargs: Any) -> None:
        # Before RedBeat connects: the real URL, not the redacted one in the conf.
        url = _REDIS_URLS.get(app) or get_settings().redis_url
        if url:
            ensure_conf(app).redis_url = url
        super().__init__(app, *args, **kwargs)

    def tick(self, min: Any = min, **kwargs: Any) -> float:  # noqa: A002 - RedBeat's signature
        try:
            if self.lock_key and not self._leading():
                return float(self.max_interval)
            if not get_redis(self.app).exists(self.app.redbeat_conf.schedule_key):
                log.warning(
                    "beat: the schedule is gone from Redis (restarted without persistence); re-installing"
                )
                self.setup_schedule()
            return float(super().tick(min=min, **kwargs))
        except REDIS_ERRORS as exc:
            log.warning("beat: Redis unavailable (%s); retrying in %.0f s", exc, RETRY_S)
            return RETRY_S

    def _leading(self) -> bool:
        """Still the one beat that schedules: our lock is alive, or we could take it back."""
        if self.lock is None:
            return False
        if self.lock.owned():
            return True
        if self.lock.acquire(blocking=False):
            log.warning("beat: lock lost (Redis restarted?) and taken back")
            return True
        return False

    def close(self) -> None:
        try:
            super().close()
        except REDIS_ERRORS:
            log.warning("beat: Redis unavailable while closing; the lock expires on its own")
            self.lock = None
