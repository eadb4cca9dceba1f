"""kombu's Redis channels, with one synchronous client each instead of one per command.

kombu's Redis channel builds a new ``redis.Redis`` around its connection pool for every publish,
ack and queue operation (``Channel.conn_or_acquire``), and redis-py builds its table of ~170
response callbacks in each: CPU spent three times per saga step task (the ack, its pipeline, the
continuation's publish). The client holds no connection of its own (the
pool does, and is safe across threads), so one per channel does the same work; it is rebuilt
whenever the channel replaces its pool (after a lost connection).

Applied in worker processes only (``worker_init``, before the consumer connects; the pool's
children inherit it): a change to kombu's class, so it reaches every Redis broker connection of
the worker, the host app's own tasks included, with no difference but the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kombu.transport import redis as kombu_redis

# Private to kombu (pinned <5.8 where relied on: tests/package/test_dependency_bounds.py), so not in its stubs.
_original: Callable[..., Any] = kombu_redis.Channel._create_client  # type: ignore[attr-defined]


def _create_client(self: Any, asynchronous: bool = False) -> Any:
    if asynchronous:
        return _original(self, asynchronous=True)
    pool = self.pool
    client = self.__dict__.get("_saga_sync_client")
    if client is None or client.connection_pool is not pool:
        client = self._saga_sync_client = _original(self, asynchronous=False)
    return client


def reuse_redis_clients() -> None:
    """From now on, each kombu Redis channel of this process keeps one synchronous client."""
    kombu_redis.Channel._create_client = _create_client  # type: ignore[attr-defined]


__all__ = ["reuse_redis_clients"]
