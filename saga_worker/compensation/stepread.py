"""A step task's read with its claim folded in (issue 45): one PostgreSQL round trip where there were two.

A step task reads where its step stands (``Journal.read_step``), then, for the common step (a
succeeded call whose tool has a compensate hook and no approval rule, in order, not yet claimed),
takes the step lock and the claim. Here the lock is taken first, on the step's key as the run's own
effect, and the claim rides in the read's statement (``StepClaim``), judged in SQL no less strictly
than ``run_step`` and ``StepAttempt`` judge it. The attempt then goes on from the claim it holds
(``Pretaken``): the claim is committed by the read, before the hook, as ever.

Any step the read does not claim (a journal that cannot fold, a fork's step, a claim row already
there, a step out of order or already done) goes on as before, from the read: the lock taken for
nothing is released first, unless the claim a twin delivery holds is in the view (its lock is the
twin's: a delivery shares its lock token with its twins, so the release would drop it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..core.keys import compensate_key
from ..journal.records import ClaimStatus, StepClaim, StepView
from ..journal.roles import UnwindJournal
from ..locks.base import StepLock
from ..recording.tools import Tool
from .attempt import Pretaken, lock_op
from .report import HALTING, CompensationStatus
from .twins import Twins

GOES_ON = frozenset(s.value for s in CompensationStatus if s not in HALTING)
HALTS = frozenset(s.value for s in HALTING)


@dataclass(frozen=True)
class StepRead:
    """What a step task read, and the claim (with its lock) the read took, if it took one."""

    view: StepView
    pretaken: Pretaken | None = None


def straight_tools(tools: Mapping[str, Tool]) -> frozenset[str]:
    """The tools whose steps go from the read straight to the claim: a compensate hook, no approval
    rule (nothing of the app's runs before the claim). Asked afresh on every step: a tool is the
    app's, and a claim taken for one whose rules changed would be taken before its approval."""
    return frozenset(
        name
        for name, tool in tools.items()
        if tool.compensate is not None and tool.compensate_needs_approval is False
    )


def read_step(
    journal: UnwindJournal,
    tools: Mapping[str, Tool],
    run_id: str,
    unwind_id: str,
    suffix: str,
    *,
    claim_ttl: float,
    lock: StepLock | None,
    refusal: str | None,
) -> StepRead:
    """The step's view, with its claim taken by the same statement where it can be (see the module)."""
    straight = straight_tools(tools) if refusal is None else frozenset()
    if not straight:
        return StepRead(journal.read_step(unwind_id, run_id, suffix))
    twins = Twins.of(unwind_id, suffix)
    key = compensate_key(run_id, suffix)
    if lock is not None and not lock_op(lock.acquire, key, twins.token, claim_ttl):
        return StepRead(journal.read_step(unwind_id, run_id, suffix))  # busy: the attempt says so
    owner = twins.new_owner()
    claim = StepClaim(straight, owner, run_id, claim_ttl, GOES_ON, HALTS)
    try:
        view = journal.read_step(unwind_id, run_id, suffix, claim)
    except BaseException:
        if lock is not None:
            lock_op(lock.release, key, twins.token)
        raise
    if view.taken is not None:
        return StepRead(view, Pretaken(view.taken, locked=lock is not None))
    held = view.claim
    twin_holds = held is not None and held.status is ClaimStatus.CLAIMED and twins.owns(held.owner)
    if lock is not None and not twin_holds:
        lock_op(lock.release, key, twins.token)
    return StepRead(view)
