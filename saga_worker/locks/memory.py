"""In-process step locks, for tests and single-process use."""

from __future__ import annotations

import threading
import time

from .base import StepLock


class MemoryStepLock(StepLock):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[str, float]] = {}

    def acquire(self, key: str, owner: str, ttl: float) -> bool:
        with self._lock:
            holder = self._held.get(key)
            if holder is not None and holder[0] != owner and holder[1] > time.monotonic():
                return False
            self._held[key] = (owner, time.monotonic() + ttl)
            return True

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        with self._lock:
            holder = self._held.get(key)
            if holder is None or holder[0] != owner:
                return False
            self._held[key] = (owner, time.monotonic() + ttl)
            return True

    def release(self, key: str, owner: str) -> None:
        with self._lock:
            if self._held.get(key, ("",))[0] == owner:
                del self._held[key]
