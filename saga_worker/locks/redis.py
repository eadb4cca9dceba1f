"""Redis step locks: ``SET key owner NX PX ttl``, with extend and release as owner-checked scripts.

Not redis-py's ``Lock``: its tokens are thread-local by default, so the lease keeper's thread could
not extend a lock taken by the hook's thread, and it has no "re-take my own lock" for redelivery.

Each thread sends its calls on a connection of its own, taken from the client's pool on its first
call and kept (a client with ``single_connection_client``), and calls ``EVALSHA`` itself: redis-py's
checkout and check-in of a pooled connection around every command, with its bookkeeping, cost about
a third of a lock call's CPU here, and a compensated step makes two calls. A thread's connection goes
back to the pool when the thread ends; a forked child takes its own.

Each call's command is packed by that connection (redis-py's ``pack_command``), sent, and its
answer read there: redis-py's ``execute_command`` around it (its retry wrapper, its response
callbacks) was most of a call's Python. A call that fails on the connection (dropped, timed out) is sent again
through redis-py's ``evalsha``, with the client's retries, as every call was before; the scripts are
idempotent for one owner, so a call sent twice decides as once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core import process_id
from .base import StepLock

log = logging.getLogger(__name__)

_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
_EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisStepLock(StepLock):
    def __init__(self, client: Any, *, prefix: str = "saga:lock:") -> None:
        self.client = client
        self.prefix = prefix
        self._acquire = client.register_script(_ACQUIRE)
        self._extend = client.register_script(_EXTEND)
        self._release = client.register_script(_RELEASE)
        self._threads = threading.local()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisStepLock:
        import redis

        return cls(
            redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5, health_check_interval=30),
            **kwargs,
        )

    def acquire(self, key: str, owner: str, ttl: float) -> bool:
        return bool(self._call(self._acquire, self.prefix + key, owner, max(1, int(ttl * 1000))))

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        return bool(self._call(self._extend, self.prefix + key, owner, max(1, int(ttl * 1000))))

    def release(self, key: str, owner: str) -> None:
        """Sent, its answer read later (by this thread's next lock call, or when the thread ends): a
        step task's release need not wait for Redis before the next step's message goes out. A
        release whose answer says it failed (a script Redis forgot: sent again then, and waited for;
        a dropped connection: the lock lapses at its TTL) changes nothing the journal decides."""
        kept = self._kept()
        kept.answer()
        connection = kept.client.connection
        try:
            connection.send_packed_command(
                connection.pack_command("EVALSHA", self._release.sha, 1, self.prefix + key, owner)
            )
        except Exception:  # not sent (a dropped connection): sent again, as every call is, and waited for
            self._call(self._release, self.prefix + key, owner)
            return
        kept.unanswered = (self._release, self.prefix + key, owner)

    def _call(self, script: Any, key: str, *args: Any) -> Any:
        kept = self._kept()
        kept.answer()
        connection = kept.client.connection
        try:
            connection.send_packed_command(connection.pack_command("EVALSHA", script.sha, 1, key, *args))
            return connection.read_response()
        except NoScriptError:  # a restarted or flushed Redis forgot it: the script loads it again
            return script(keys=[key], args=list(args), client=kept.client)
        except (RedisConnectionError, RedisTimeoutError, OSError):
            connection.disconnect()  # nothing half-read stays on it: the call again, with retries
        try:
            return kept.client.evalsha(script.sha, 1, key, *args)
        except NoScriptError:
            return script(keys=[key], args=list(args), client=kept.client)

    def _kept(self) -> _Kept:
        """This thread's client, on a connection of the pool kept for this thread (in this process)."""
        kept: _Kept | None = getattr(self._threads, "kept", None)
        if kept is None or kept.pid != process_id.current():
            client = type(self.client)(
                connection_pool=self.client.connection_pool, single_connection_client=True
            )
            kept = self._threads.kept = _Kept(process_id.current(), client)
        return kept

    def _thread_client(self) -> Any:
        return self._kept().client


class _Kept:
    """A thread's client and the release sent on it whose answer is still to be read: read before
    the connection carries anything else, and before it goes back to the pool with the thread."""

    __slots__ = ("client", "pid", "unanswered")

    def __init__(self, pid: int, client: Any) -> None:
        self.pid = pid
        self.client = client
        self.unanswered: tuple[Any, str, str] | None = None

    def answer(self) -> None:
        sent, self.unanswered = self.unanswered, None
        if sent is None:
            return
        try:
            self.client.connection.read_response()
        except NoScriptError:  # Redis forgot the script: the release again, through it
            script, key, owner = sent
            script(keys=[key], args=[owner], client=self.client)
        except Exception:  # the lock lapses at its TTL; the journal's claim decides meanwhile
            log.warning("step lock release not confirmed; it lapses at its TTL", exc_info=True)

    def __del__(self) -> None:
        if self.pid == process_id.current():
            with contextlib.suppress(Exception):  # a thread's end: nothing to tell anyone
                self.answer()
