"""A worker's kombu Redis channels keep one client each (issue 16), and still follow a new pool."""

from __future__ import annotations

from kombu import Connection

from saga_worker.celery.transport import reuse_redis_clients


def test_a_redis_channel_reuses_its_client_until_it_replaces_its_pool(redis_url: str) -> None:
    reuse_redis_clients()
    with Connection(redis_url) as conn:
        channel = conn.default_channel
        first = channel._create_client()
        assert channel._create_client() is first
        channel._put("saga-test-broker-clients", {"body": "x"})
        assert channel._size("saga-test-broker-clients") == 1
        channel._purge("saga-test-broker-clients")
        channel._disconnect_pools()  # what a lost connection does
        again = channel._create_client()
        assert again is not first
        assert again.connection_pool is channel.pool
        assert channel._create_client(asynchronous=True) is not again
