"""Step locks: the fast path that says `busy` without a journal write. Never the source of truth:
the journal's claim (compare-and-set with an owner token) decides who compensates a step."""

from __future__ import annotations

import abc


class StepLock(abc.ABC):
    @abc.abstractmethod
    def acquire(self, key: str, owner: str, ttl: float) -> bool:
        """Take the lock, or re-take it if ``owner`` already holds it (a redelivered task)."""

    @abc.abstractmethod
    def extend(self, key: str, owner: str, ttl: float) -> bool:
        """Push the expiry out while ``owner`` holds it; False once it does not."""

    @abc.abstractmethod
    def release(self, key: str, owner: str) -> None:
        """Drop the lock if ``owner`` still holds it (never another holder's)."""
