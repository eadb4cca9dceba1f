"""A step task's claim taken with its read (PostgreSQL folds the two into one statement; the other
journals read, then claim): on every journal the step is claimed, under its lock, before its hook,
and only a step that goes straight to its claim; a step refused, done already or gated leaves no
claim behind and its lock free."""

from __future__ import annotations

from typing import Any

import pytest

from saga_worker import CallOptions, InvalidInputError, Journal, Tool, ToolCall, run_durable
from saga_worker import executor as ex
from saga_worker.core.keys import compensate_key
from saga_worker.executor import Finalize, Step
from saga_worker.journal.records import ClaimStatus
from saga_worker.locks.memory import MemoryStepLock
from saga_worker.recording.planning import scripted

TTL = 5.0
STEPS = ("call-3", "call-2", "call-1")  # unwind order


class Shop:
    """Three tools; each compensate hook notes the step's claim and lock as it found them."""

    def __init__(self, journal: Journal, lock: MemoryStepLock) -> None:
        self.journal, self.lock = journal, lock
        self.seen: list[tuple[str, ClaimStatus | None, bool]] = []
        self.fail: set[str] = set()

    def tools(self, **options: Any) -> dict[str, Tool]:
        def make(name: str) -> Tool:
            def compensate(input: Any, output: Any, opts: CallOptions) -> None:
                run_id, suffix = opts.idempotency_key.split(":comp:")
                claim = self.journal.get_claim(run_id, suffix)
                held = not self.lock.acquire(opts.idempotency_key, "a stranger", TTL)
                self.seen.append((suffix, None if claim is None else claim.status, held))
                if name in self.fail:
                    raise RuntimeError(f"{name} refused")

            return Tool(lambda input, opts: {"ok": name}, compensate, **options)

        return {name: make(name) for name in ("charge", "reserve", "notify")}


def order(journal: Journal, shop: Shop, run_id: str) -> None:
    run_durable(
        run_id,
        journal=journal,
        tools=shop.tools(),
        planner=scripted(ToolCall("charge", {}), ToolCall("reserve", {}), ToolCall("notify", {})),
    )


def step(journal: Journal, tools: dict[str, Tool], run_id: str, suffix: str, lock: MemoryStepLock) -> Any:
    return ex.run_step(journal, tools, run_id, "u", suffix, claim_ttl=TTL, lock=lock)


def free(lock: MemoryStepLock, run_id: str, suffix: str) -> bool:
    key = compensate_key(run_id, suffix)
    if not lock.acquire(key, "probe", TTL):
        return False
    lock.release(key, "probe")
    return True


@pytest.mark.backends("memory", "sqlite", "postgres")
def test_each_step_is_claimed_under_its_lock_before_its_hook_and_the_chain_completes(
    journal: Journal, run_id: str
) -> None:
    lock = MemoryStepLock()
    shop = Shop(journal, lock)
    order(journal, shop, run_id)
    tools = shop.tools()
    nxt = ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    while isinstance(nxt, Step):
        nxt = step(journal, tools, run_id, nxt.suffix, lock)
    report = ex.finalize_unwind(journal, run_id, "u")
    assert [e.status.value for e in report.entries] == ["compensated"] * 3
    assert shop.seen == [(suffix, ClaimStatus.CLAIMED, True) for suffix in STEPS]
    assert all(free(lock, run_id, suffix) for suffix in STEPS)


@pytest.mark.backends("sqlite", "postgres")
def test_a_step_sent_before_the_one_before_it_ended_is_refused_and_leaves_no_claim(
    journal: Journal, run_id: str
) -> None:
    lock = MemoryStepLock()
    shop = Shop(journal, lock)
    order(journal, shop, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    with pytest.raises(InvalidInputError, match="has no outcome yet"):
        step(journal, shop.tools(), run_id, "call-2", lock)
    assert journal.get_claim(run_id, "call-2") is None and free(lock, run_id, "call-2")
    assert shop.seen == []


@pytest.mark.backends("sqlite", "postgres")
def test_a_step_after_one_that_halted_is_refused_and_leaves_no_claim(journal: Journal, run_id: str) -> None:
    lock = MemoryStepLock()
    shop = Shop(journal, lock)
    shop.fail.add("notify")
    order(journal, shop, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    assert step(journal, shop.tools(), run_id, "call-3", lock) == Finalize(run_id, "u")
    with pytest.raises(InvalidInputError, match="halted the unwind"):
        step(journal, shop.tools(), run_id, "call-2", lock)
    assert journal.get_claim(run_id, "call-2") is None and free(lock, run_id, "call-2")


@pytest.mark.backends("sqlite", "postgres")
def test_a_duplicate_of_a_finished_step_calls_no_hook_and_leaves_its_lock_free(
    journal: Journal, run_id: str
) -> None:
    lock = MemoryStepLock()
    shop = Shop(journal, lock)
    order(journal, shop, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    first = step(journal, shop.tools(), run_id, "call-3", lock)
    again = step(journal, shop.tools(), run_id, "call-3", lock)
    assert again == first == Step(run_id, "u", "call-2", False, 1, 3)
    assert len(shop.seen) == 1 and free(lock, run_id, "call-3")
    claim = journal.get_claim(run_id, "call-3")
    assert claim is not None and (claim.status, claim.attempts) == (ClaimStatus.COMPENSATED, 1)


@pytest.mark.backends("sqlite", "postgres")
def test_a_gated_step_awaits_approval_with_no_claim_taken(journal: Journal, run_id: str) -> None:
    lock = MemoryStepLock()
    shop = Shop(journal, lock)
    order(journal, shop, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    gated = shop.tools(compensate_needs_approval=True)
    assert step(journal, gated, run_id, "call-3", lock) == Finalize(run_id, "u")
    assert journal.list_unwind_entries("u")[0]["status"] == "awaiting-approval"
    assert journal.get_claim(run_id, "call-3") is None and free(lock, run_id, "call-3")


@pytest.mark.backends("sqlite", "postgres")
def test_a_dry_run_step_takes_no_claim(journal: Journal, run_id: str) -> None:
    lock = MemoryStepLock()
    shop = Shop(journal, lock)
    order(journal, shop, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=True, claim_ttl=TTL)
    step(journal, shop.tools(), run_id, "call-3", lock)
    assert journal.list_unwind_entries("u")[0]["status"] == "would-compensate"
    assert journal.get_claim(run_id, "call-3") is None and free(lock, run_id, "call-3")


@pytest.mark.backends("sqlite", "postgres")
def test_a_step_another_unwind_holds_reads_busy_and_its_claim_stays_the_holders(
    journal: Journal, run_id: str
) -> None:
    lock = MemoryStepLock()
    shop = Shop(journal, lock)
    order(journal, shop, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    holder = ex.step_owner("other", "call-3")
    journal.claim_compensation(
        run_id,
        "call-3",
        via_run_id=run_id,
        owner=holder,
        ttl=TTL,
        idempotency_key=compensate_key(run_id, "call-3"),
    )
    assert step(journal, shop.tools(), run_id, "call-3", lock) == Finalize(run_id, "u")
    assert journal.list_unwind_entries("u")[0]["status"] == "busy"
    claim = journal.get_claim(run_id, "call-3")
    assert claim is not None and (claim.owner, claim.status) == (holder, ClaimStatus.CLAIMED)
    assert shop.seen == [] and free(lock, run_id, "call-3")
