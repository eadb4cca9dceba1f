"""Compensation claims (the journal's truth about who undoes a step) in memory."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ...core.storable import storable_or_none
from ..records import ClaimAttempt, ClaimStatus, CompensationClaim, parse_status
from .common import MemoryState


def claim_out(claim: CompensationClaim) -> CompensationClaim:
    parse_status(ClaimStatus, claim.status, claim.origin_run_id, f"compensation {claim.suffix!r}")
    return claim


class MemoryClaims(MemoryState):
    """``ClaimsPart`` (``journal/parts.py``) in memory."""

    _claims: dict[tuple[str, str], CompensationClaim]
    # Each claim's lease deadline on ``lease_clock`` (this process's monotonic clock), which is what
    # judges it: the wall-clock ``lease_expires_at`` (what a claim shows) can step, and a live lease
    # must never look expired because it did.
    _lease_deadlines: dict[tuple[str, str], float]

    def lease_clock(self) -> float:
        """The clock leases are judged by: one that never steps. A test harness that moves time
        itself (a clock its state machine advances) overrides it together with ``now``."""
        return time.monotonic()

    def get_claim(self, origin_run_id: str, suffix: str) -> CompensationClaim | None:
        with self._lock:
            claim = self._claims.get((origin_run_id, suffix))
            return None if claim is None else claim_out(claim)

    def get_claims(
        self, origin_and_suffixes: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CompensationClaim]:
        with self._lock:
            return {k: claim_out(self._claims[k]) for k in origin_and_suffixes if k in self._claims}

    def claim_compensation(
        self,
        origin_run_id: str,
        suffix: str,
        *,
        via_run_id: str,
        owner: str,
        ttl: float,
        idempotency_key: str,
    ) -> ClaimAttempt:
        with self._lock:
            now, monotonic = self.now(), self.lease_clock()
            key = (origin_run_id, suffix)
            current = self._claims.get(key)
            if current is not None:
                claim_out(current)  # an unknown status fails closed, as SQL's compare-and-set does
            taken: dict[str, Any] = {
                "status": ClaimStatus.CLAIMED,
                "owner": owner,
                "lease_expires_at": now + ttl,
                "via_run_id": via_run_id,
                "error": None,
                "started_at": now,
                "finished_at": None,
            }
            if current is None:
                claim = CompensationClaim(
                    origin_run_id=origin_run_id,
                    suffix=suffix,
                    attempts=1,
                    idempotency_key=idempotency_key,
                    **taken,
                )
            else:
                takeable = current.status is ClaimStatus.FAILED or (
                    current.status is ClaimStatus.CLAIMED
                    and (self._lease_deadlines.get(key, 0.0) < monotonic or current.owner == owner)
                )
                if not takeable:
                    return ClaimAttempt(False, current)
                claim = replace(current, attempts=current.attempts + 1, **taken)
            self._claims[key] = claim
            self._lease_deadlines[key] = monotonic + ttl
            return ClaimAttempt(True, claim)

    def lease_left(self, claim: CompensationClaim) -> float:
        with self._lock:
            deadline = self._lease_deadlines.get((claim.origin_run_id, claim.suffix), 0.0)
        return deadline - self.lease_clock()

    def renew_claim(self, origin_run_id: str, suffix: str, owner: str, ttl: float) -> bool:
        with self._lock:
            current = self._claims.get((origin_run_id, suffix))
            if current is None or current.owner != owner or current.status is not ClaimStatus.CLAIMED:
                return False
            self._claims[(origin_run_id, suffix)] = replace(current, lease_expires_at=self.now() + ttl)
            self._lease_deadlines[(origin_run_id, suffix)] = self.lease_clock() + ttl
            return True

    def finish_claim(
        self, origin_run_id: str, suffix: str, owner: str, status: ClaimStatus, error: str | None = None
    ) -> bool:
        with self._lock:
            current = self._claims.get((origin_run_id, suffix))
            if current is None or current.owner != owner or current.status is not ClaimStatus.CLAIMED:
                return False
            self._claims[(origin_run_id, suffix)] = replace(
                current, status=status, error=storable_or_none(error), finished_at=self.now()
            )
            return True
