"""The Redis step lock's connections: one per thread that calls it, given back when the thread ends,
never shared with a forked child, and its scripts loaded again when Redis has forgotten them."""

from __future__ import annotations

import gc
import os
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis

from saga_worker.locks.redis import RedisStepLock

pytestmark = pytest.mark.redis


@pytest.fixture
def named() -> str:
    return f"saga-lock-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def lock(redis_url: str, named: str) -> Iterator[RedisStepLock]:
    # Every connection of the lock's pool names itself, so the server can say how many it holds.
    made = RedisStepLock(redis.Redis.from_url(redis_url, client_name=named), prefix=f"saga:test:{named}:")
    yield made
    made.client.close()


def _connections_named(redis_url: str, name: str) -> int:
    with redis.Redis.from_url(redis_url) as admin:
        return sum(1 for client in admin.client_list() if client.get("name") == name)


def _hold_and_free(lock: RedisStepLock, key: str, rounds: int) -> None:
    for _ in range(rounds):
        assert lock.acquire(key, "mine", 30)
        assert not lock.acquire(key, "theirs", 30)
        assert lock.extend(key, "mine", 30)
        lock.release(key, "theirs")  # not the holder: nothing happens
        assert not lock.acquire(key, "theirs", 30)
        lock.release(key, "mine")


def test_threads_each_keep_one_connection_and_give_it_back_when_they_end(
    lock: RedisStepLock, redis_url: str, named: str
) -> None:
    errors: list[BaseException] = []

    def work(key: str) -> None:
        try:
            _hold_and_free(lock, key, 50)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    for batch in range(3):
        threads = [threading.Thread(target=work, args=(f"{batch}-{n}",)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        gc.collect()
        # Six threads, six connections at most: each batch's threads reuse those the last one gave back.
        assert _connections_named(redis_url, named) <= 6
    assert errors == []


def test_a_forked_child_uses_connections_of_its_own(lock: RedisStepLock, redis_url: str) -> None:
    lock.acquire("parent-warm", "mine", 30)  # the parent's thread has its connection before the fork
    lock.release("parent-warm", "mine")
    pid = os.fork()
    if pid == 0:  # the child: had it written on the parent's socket, replies would cross
        try:
            _hold_and_free(lock, "child", 200)
        except BaseException:  # noqa: BLE001 - the exit status says it
            os._exit(1)
        os._exit(0)
    _hold_and_free(lock, "parent", 200)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    _hold_and_free(lock, "parent-after", 5)  # the child's exit did not close the parent's connection


def test_scripts_load_again_after_redis_forgets_them(lock: RedisStepLock, redis_url: str) -> None:
    assert lock.acquire("k", "mine", 30)
    with redis.Redis.from_url(redis_url) as admin:
        admin.script_flush()  # as a restarted Redis, or SCRIPT FLUSH
    assert not lock.acquire("k", "theirs", 30)
    lock.release("k", "mine")
    with redis.Redis.from_url(redis_url) as admin:
        admin.script_flush()
    assert lock.acquire("k", "theirs", 30)
    with redis.Redis.from_url(redis_url) as admin:
        admin.script_flush()
    assert lock.extend("k", "theirs", 30)


def test_a_release_whose_script_redis_forgot_is_sent_again_and_frees_the_lock(
    lock: RedisStepLock, redis_url: str
) -> None:
    # A release is sent and its answer read on the thread's next call: one Redis refused (NOSCRIPT)
    # is sent again through the script, before that next call goes out.
    assert lock.acquire("k", "mine", 30)
    with redis.Redis.from_url(redis_url) as admin:
        admin.script_flush()
    lock.release("k", "mine")
    assert lock.acquire("k", "theirs", 30)
    assert not lock.extend("k", "mine", 30)  # each call reads its own answer, never the release's
    lock.release("k", "theirs")
    assert not lock.extend("k", "theirs", 30)


@pytest.mark.parametrize(
    ("key", "owner"), [("run-1:comp:s0", "f00d:0"), ("k\u00e9y", "ow\u00f1er"), ("k" * 2000, "o" * 2000)]
)
def test_each_call_stores_the_key_and_owner_as_given(
    lock: RedisStepLock, redis_url: str, key: str, owner: str
) -> None:
    # Non-ASCII and long arguments go on the wire as the client's encoding writes them.
    assert lock.acquire(key, owner, 30)
    with redis.Redis.from_url(redis_url, decode_responses=True) as admin:
        assert admin.get(lock.prefix + key) == owner
        assert 0 < admin.pttl(lock.prefix + key) <= 30_000
        assert not lock.acquire(key, "someone else", 30)
        assert lock.extend(key, owner, 60)
        assert admin.pttl(lock.prefix + key) > 30_000
        lock.release(key, owner)
        assert lock.acquire("another", owner, 30)  # reads the release's answer first
        assert admin.get(lock.prefix + key) is None


def test_a_call_on_a_dropped_connection_is_sent_again_and_decides(
    lock: RedisStepLock, redis_url: str
) -> None:
    assert lock.acquire("k", "mine", 30)
    with redis.Redis.from_url(redis_url) as admin:  # the server drops the thread's connection
        killed = admin.client_kill_filter(_id=lock._thread_client().client_id())
    assert killed == 1
    assert not lock.acquire("k", "theirs", 30)  # sent again on a fresh connection: the lock is held
    assert lock.extend("k", "mine", 30)
    lock.release("k", "mine")
    assert lock.acquire("k", "theirs", 30)
    lock.release("k", "theirs")
