"""A worker's kombu Redis channels keep one client each (issue 16), and still follow a new pool."""

from __future__ import annotations

from kombu import Connection
from kombu.transport import redis as kombu_redis

from saga_worker.celery.transport import reuse_redis_clients


def test_a_redis_channel_reuses_its_client_until_it_replaces_its_pool(redis_url: str) -> None:
    reuse_redis_clients()
    with Connection(redis_url) as conn:
        channel = conn.default_channel
        assert isinstance(channel, kombu_redis.Channel)
        first = channel._create_client()  # type: ignore[attr-defined]  # private to kombu
        assert channel._create_client() is first  # type: ignore[attr-defined]  # private to kombu
        channel._put("saga-test-broker-clients", {"body": "x"})
        assert channel._size("saga-test-broker-clients") == 1
        channel._purge("saga-test-broker-clients")
        channel._disconnect_pools()  # type: ignore[attr-defined]  # what a lost connection does; private to kombu, not in its stubs
        again = channel._create_client()  # type: ignore[attr-defined]  # private to kombu
        assert again is not first
        assert again.connection_pool is channel.pool
        assert channel._create_client(asynchronous=True) is not again  # type: ignore[attr-defined]  # private to kombu
