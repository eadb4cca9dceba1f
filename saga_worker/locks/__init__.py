"""Step locks, chosen by URL: ``memory://`` or ``redis://…``; none means the journal claim alone."""

from __future__ import annotations

from .base import StepLock
from .memory import MemoryStepLock


def open_lock(url: str | None) -> StepLock | None:
    if not url:
        return None
    if url.startswith("memory:"):
        return MemoryStepLock()
    if url.startswith(("redis://", "rediss://", "unix://")):
        from .redis import RedisStepLock

        return RedisStepLock.from_url(url)
    from ..errors import InvalidInputError

    raise InvalidInputError(f"no step lock for URL {url!r}: use redis://… (or leave it unset)")


__all__ = ["MemoryStepLock", "StepLock", "open_lock"]
