"""Compensation claims (the journal's truth about who undoes a step) in SQL: statements and part."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from ...core.storable import storable_or_none
from .. import driver
from ..dialects import LeaseColumns
from ..driver import Prepared
from ..records import ClaimAttempt, ClaimStatus, CompensationClaim, parse_status
from ..schema import claims
from .common import PlumbingStatements, SqlPlumbing, StatementsBase, b

# A claim by its key; one its owner still holds; the columns of its lease (``dialects.LeaseColumns``).
KEY = (claims.c.origin_run_id == b("origin"), claims.c.suffix == b("step_suffix"))
MINE = (*KEY, claims.c.owner == b("holder"), claims.c.status == ClaimStatus.CLAIMED.value)
LEASE = LeaseColumns(
    claims.c.lease_expires_at,
    claims.c.attempts,
    claims.c.lease_boot_id,
    claims.c.lease_boot_expires_at,
    claims.c.lease_boot_attempt,
)


class ClaimStatements(StatementsBase):
    def _build_claims(self) -> None:
        """Compensation claims: the journal's truth about who undoes a step."""
        self._build_claim_taking()
        p = self._prepare
        clock = self.policy.clock()
        self.claim_get = p(sa.select(claims).where(*KEY))
        self.claims_of_origin = p(sa.select(claims).where(claims.c.origin_run_id == b("origin")))
        self.claim_renew = p(
            sa.update(claims)
            .where(*MINE)
            .values(**self.policy.lease_values(LEASE, claims.c.attempts))
            .returning(claims.c.owner)
        )
        self.claim_finish = p(
            sa.update(claims)
            .where(*MINE)
            .values(status=b("new_status"), error=b("new_error"), finished_at=clock)
            .returning(claims.c.owner)
        )

    def _build_claim_taking(self) -> None:
        """A claim's first attempt (insert-if-absent), and a later one (take a failed claim, or one
        whose lease ran out)."""
        clock = self.policy.clock()
        p = self._prepare
        # The same owner may take its own claim back: a redelivered task re-drives its dead attempt.
        takeable = sa.or_(
            claims.c.status == ClaimStatus.FAILED.value,
            sa.and_(
                claims.c.status == ClaimStatus.CLAIMED.value,
                sa.or_(self.policy.lease_expired(LEASE), claims.c.owner == b("holder")),
            ),
        )
        self.claim_insert = p(
            self.policy.insert(claims)
            .values(
                origin_run_id=b("origin"),
                suffix=b("step_suffix"),
                status=ClaimStatus.CLAIMED.value,
                owner=b("holder"),
                attempts=1,
                idempotency_key=b("key"),
                via_run_id=b("via"),
                started_at=clock,
                **self.policy.lease_values(LEASE, 1),
            )
            .on_conflict_do_nothing(index_elements=["origin_run_id", "suffix"])
            .returning(*claims.c)
        )
        self.claim_take = p(
            sa.update(claims)
            .where(*KEY, takeable)
            .values(
                status=ClaimStatus.CLAIMED.value,
                owner=b("holder"),
                attempts=claims.c.attempts + 1,
                via_run_id=b("via"),
                error=None,
                started_at=clock,
                finished_at=None,
                **self.policy.lease_values(LEASE, claims.c.attempts + 1),
            )
            .returning(*claims.c)
        )


def claim_row(m: Mapping[Any, Any]) -> CompensationClaim:
    return CompensationClaim(
        origin_run_id=m["origin_run_id"],
        suffix=m["suffix"],
        status=parse_status(ClaimStatus, m["status"], m["origin_run_id"], f"compensation {m['suffix']!r}"),
        owner=m["owner"],
        lease_expires_at=m["lease_expires_at"],
        attempts=m["attempts"],
        idempotency_key=m["idempotency_key"],
        via_run_id=m["via_run_id"],
        error=m["error"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        lease_boot_id=m.get("lease_boot_id"),
        lease_boot_expires_at=m.get("lease_boot_expires_at"),
        lease_boot_attempt=m.get("lease_boot_attempt"),
    )


class ClaimReads(PlumbingStatements, Protocol):
    """The statements ``SqlClaims`` reads (its own and other areas')."""

    claim_finish: Prepared
    claim_get: Prepared
    claim_insert: Prepared
    claim_renew: Prepared
    claim_take: Prepared
    claims_of_origin: Prepared


class SqlClaims(SqlPlumbing):
    """``ClaimsPart`` (``journal/parts.py``) on the statements above."""

    _q: ClaimReads

    def get_claim(self, origin_run_id: str, suffix: str) -> CompensationClaim | None:
        row = self._fetch(
            lambda tx: tx.one(self._q.claim_get, {"origin": origin_run_id, "step_suffix": suffix})
        )
        return None if row is None else claim_row(row)

    def get_claims(
        self, origin_and_suffixes: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CompensationClaim]:
        wanted = set(origin_and_suffixes)
        origins = sorted({o for o, _ in wanted})

        def work(tx: driver.Tx) -> list[driver.Row]:
            # One indexed read per origin run (a run's own, plus one per fork it shares effects with).
            return [row for o in origins for row in tx.all(self._q.claims_of_origin, {"origin": o})]

        rows = self._fetch(work) if wanted else []
        found = [c for c in map(claim_row, rows) if (c.origin_run_id, c.suffix) in wanted]  # all parsed
        return {(c.origin_run_id, c.suffix): c for c in found}

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
        q = self._q
        params = {
            "origin": origin_run_id,
            "step_suffix": suffix,
            "holder": owner,
            "ttl": float(ttl),
            "key": idempotency_key,
            "via": via_run_id,
            "now": time.time(),
            **self.policy.lease_clock(),
        }

        def work(tx: driver.Tx) -> ClaimAttempt:
            row = tx.one(q.claim_insert, params) or tx.one(q.claim_take, params)
            if row is not None:
                return ClaimAttempt(True, claim_row(row))
            current = tx.one(q.claim_get, params)
            return ClaimAttempt(False, None if current is None else claim_row(current))

        return self._write(work, alone=f"the compensation claim of step {suffix!r} of run {origin_run_id!r}")

    def lease_left(self, claim: CompensationClaim) -> float:
        return self.policy.lease_left(claim, self.now)

    def renew_claim(self, origin_run_id: str, suffix: str, owner: str, ttl: float) -> bool:
        params = {
            "origin": origin_run_id,
            "step_suffix": suffix,
            "holder": owner,
            "ttl": float(ttl),
            "now": time.time(),
            **self.policy.lease_clock(),
        }
        claim = f"the lease of the compensation of step {suffix!r} of run {origin_run_id!r}"
        return self._write(lambda tx: tx.one(self._q.claim_renew, params), alone=claim) is not None

    def finish_claim(
        self, origin_run_id: str, suffix: str, owner: str, status: ClaimStatus, error: str | None = None
    ) -> bool:
        params = {
            "origin": origin_run_id,
            "step_suffix": suffix,
            "holder": owner,
            "new_status": status.value,
            "new_error": storable_or_none(error),
            "now": time.time(),
        }
        claim = f"the outcome of the compensation of step {suffix!r} of run {origin_run_id!r}"
        return self._write(lambda tx: tx.one(self._q.claim_finish, params), alone=claim) is not None
