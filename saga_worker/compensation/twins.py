"""The deliveries of one step message of a distributed unwind (a redelivery, a duplicate): they share
a token, so an attempt can tell a claim of its own step from a stranger's (``StepAttempt`` asks)."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from ..journal.records import ClaimStatus, CompensationClaim, ToolRecord
from ..journal.roles import UnwindJournal


@dataclass(frozen=True)
class Twins:
    """The deliveries of one step of one distributed unwind, the same ``token`` for every delivery of
    that step's message: it owns the step's fast-path lock (so a redelivered task re-takes its dead
    attempt's lock) and prefixes each delivery's own journal owner (so a delivery can tell its
    twin's claim from a stranger's). The journal claim itself is per delivery: two live copies can
    never both hold it.

    ``entry_at`` is where the step's unwind entry goes, ``(unwind_id, position)``: an attempt that
    writes the claim's outcome writes the entry with it (``finish_step``, one commit) and
    keeps the stored one in ``StepAttempt.stored``."""

    token: str
    sleep: Callable[[float], None] = time.sleep
    entry_at: tuple[str, int] | None = None

    @classmethod
    def of(
        cls,
        unwind_id: str,
        suffix: str,
        sleep: Callable[[float], None] = time.sleep,
        *,
        position: int | None = None,
    ) -> Twins:
        digest = hashlib.sha256(f"{unwind_id}\n{suffix}".encode()).hexdigest()[:16]
        entry_at = None if position is None else (unwind_id, position)
        return cls(f"unwind:{unwind_id[:60]}:{digest}", sleep, entry_at)

    def owns(self, claim_owner: str) -> bool:
        return claim_owner == self.token or claim_owner.startswith(self.token + ":")

    def new_owner(self) -> str:
        return f"{self.token}:{uuid.uuid4().hex[:8]}"

    def live_holder(
        self, journal: UnwindJournal, record: ToolRecord, first: CompensationClaim | None, ttl: float
    ) -> bool:
        """Is another delivery of this same step alive and holding it right now?

        A live lease held by a delivery of this step means either that attempt died mid-hook (a
        redelivery: wait out its lease, then take the step over) or a duplicate delivery is running
        it (a visibility timeout shorter than the hook, a re-sent continuation: leave it alone). A
        live holder renews its lease every ttl/3, so watch the lease for a little over one renewal
        period. ``first`` is the claim as the step task read it."""
        if first is None or first.status is not ClaimStatus.CLAIMED or not self.owns(first.owner):
            return False
        if journal.lease_left(first) <= 0:
            return False
        waited, interval = 0.0, ttl / 10
        while waited < ttl * 0.6:
            self.sleep(interval)
            waited += interval
            now = journal.get_claim(record.origin_run_id, record.suffix)
            if now is None or now.owner != first.owner:
                return False
            # Any new deadline is a renewal: one written by a clock that stepped back can be earlier.
            if now.status is not ClaimStatus.CLAIMED or now.lease_expires_at != first.lease_expires_at:
                return True  # renewed or finished by the twin
            if journal.lease_left(now) <= 0:
                return False
        # Not renewed: that attempt is dead. Its claim is its own, so wait out the lease; the take-over
        # is then a compare-and-set on the expired lease, which only one redelivery can win.
        remaining = journal.lease_left(first)
        if remaining > 0:
            self.sleep(remaining + ttl / 20)
        return False
