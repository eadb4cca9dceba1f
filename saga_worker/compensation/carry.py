"""The in-process unwind's n+1 commits: a step's outcome carried to the next step's claim.

After hook n returns, its outcome is not committed on its own: it is held here and written with the
claim of step n+1, in one commit (``Journal.finish_and_claim``); the last step's, with the unwind's
complete state (``Journal.finish_last_step``, in ``engine``). The first step's claim, when it needs
nothing of the app's before it, was taken in the tombstone's own commit (``pretaken``). The contract's points stay where they
are: the claim of a step is committed before its hook (it is the same commit), and every outcome is
committed before the report says it (``flush`` at the end of each step that takes no claim, and
before the state of an unwind that is not complete). Nothing of the next step that calls the app's
code (``recover``, an approval rule) runs while an outcome is held: the attempt flushes it first.

An outcome held is a claim whose lease is no longer renewed. The next claim follows within the
same few journal reads, so the lease cannot lapse meanwhile unless the process stalls for the whole
lease; if it did and another unwinder took the step over, the outcome's compare-and-set writes
nothing: the step then reads busy (``LEASE_LOST``, as when the outcome is written at once), nothing
is claimed after it, and the steps after it read not-attempted.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import faults
from ..core.frozen import quick
from ..journal.records import ClaimAttempt, FinishedClaim
from ..journal.roles import UnwindJournal
from .report import CompensationEntry, CompensationStatus

LEASE_LOST = (
    "the compensate hook returned, but this attempt's lease had lapsed and another unwinder took the "
    "step over: its outcome is the step's"
)


@quick
@dataclass(frozen=True)
class HeldOutcome:
    """A step whose hook returned: its outcome to write, and its entry either way."""

    finished: FinishedClaim
    key: str
    done: CompensationEntry  # the entry if the outcome is written

    @property
    def lost(self) -> CompensationEntry:
        """The entry if it is not (the claim moved on): busy, ``LEASE_LOST``. Built only then: a
        pydantic model per step that almost never reads it."""
        return self.done.model_copy(update={"status": CompensationStatus.BUSY, "error": LEASE_LOST})


class OutcomeCarry:
    """At most one outcome held between a step's hook and the next step's claim, for one unwind
    (one thread: an in-process unwind's steps run one after the other)."""

    def __init__(
        self, journal: UnwindJournal, pretaken: ClaimAttempt | None = None, first_owner: str | None = None
    ) -> None:
        self.journal = journal
        # The first step's claim, taken in the tombstone's commit (``Journal.condemn_read_and_claim``):
        # the step's own claim when it gets there, taken by no one else meanwhile (it is held).
        self.pretaken = pretaken
        # The owner that commit claimed under, for the unwind's first claim when none came back: a
        # commit whose answer was lost (a connection cut after it, the work retried) may have taken
        # the claim all the same, and its owner takes its own claim back instead of reading busy.
        self.first_owner = first_owner
        self.held: HeldOutcome | None = None
        # The entry of a step whose outcome turned out not written (its claim moved on), once known.
        self.lost: CompensationEntry | None = None

    def hold(self, outcome: HeldOutcome) -> None:
        self.flush()  # never two: a step with one held does not reach its own hook without claiming
        self.held = outcome

    def flush(self) -> None:
        """Write the outcome held, on its own (the next step takes no claim, calls the app's code,
        or the unwind ends)."""
        held, self.held = self.held, None
        if held is None:
            return
        f = held.finished
        self._settled(held, self.journal.finish_claim(f.origin_run_id, f.suffix, f.owner, f.status, f.error))

    def claim(
        self,
        origin_run_id: str,
        suffix: str,
        *,
        via_run_id: str,
        owner: str,
        ttl: float,
        idempotency_key: str,
    ) -> ClaimAttempt | None:
        """The step's claim, with the outcome held (if any) in the same commit; None when that
        outcome was not written (nothing claimed: the unwind halts at the step before)."""
        pretaken, self.pretaken = self.pretaken, None
        first_owner, self.first_owner = self.first_owner, None
        if pretaken is not None and pretaken.claim is not None and self.held is None:
            mine = pretaken.claim
            if (mine.origin_run_id, mine.suffix) == (origin_run_id, suffix):
                return pretaken  # the first step: claimed with the tombstone, under its own owner
        if first_owner is not None and self.held is None:
            owner = first_owner
        held, self.held = self.held, None
        if held is None:
            return self.journal.claim_compensation(
                origin_run_id,
                suffix,
                via_run_id=via_run_id,
                owner=owner,
                ttl=ttl,
                idempotency_key=idempotency_key,
            )
        got = self.journal.finish_and_claim(
            held.finished,
            origin_run_id,
            suffix,
            via_run_id=via_run_id,
            owner=owner,
            ttl=ttl,
            idempotency_key=idempotency_key,
        )
        self._settled(held, got is not None)
        return got

    def _settled(self, held: HeldOutcome, written: bool) -> None:
        if written:
            faults.point("after_outcome", held.key)
        else:
            self.lost = held.lost
