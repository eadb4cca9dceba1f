"""Redis step locks: ``SET key owner NX PX ttl``, with extend and release as owner-checked scripts.

Not redis-py's ``Lock``: its tokens are thread-local by default, so the lease keeper's thread could
not extend a lock taken by the hook's thread, and it has no "re-take my own lock" for redelivery.
"""

from __future__ import annotations

from typing import Any

from .base import StepLock

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

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisStepLock:
        import redis

        return cls(
            redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5, health_check_interval=30),
            **kwargs,
        )

    def acquire(self, key: str, owner: str, ttl: float) -> bool:
        return bool(self._acquire(keys=[self.prefix + key], args=[owner, max(1, int(ttl * 1000))]))

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        return bool(self._extend(keys=[self.prefix + key], args=[owner, max(1, int(ttl * 1000))]))

    def release(self, key: str, owner: str) -> None:
        self._release(keys=[self.prefix + key], args=[owner])
