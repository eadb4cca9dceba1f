"""Proof that the suite bites: each deliberately broken build (tests/faults/breaks.py) runs a smoke
scenario, and the checker must report the broken promise. A suite that stays green here is blind."""

from __future__ import annotations

import pytest

from saga_worker import Journal

from . import breaks, scenarios
from .harness import OwnRedis
from .ledger import Ledger

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def test_without_journal_fencing_a_late_holder_overwrites_the_new_owners_outcome(
    pg_journal: Journal, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str
) -> None:
    out = scenarios.stopped_holder(
        pg_journal, fault_ledger, worker_env, run_id, extra=("--break", "no-fencing")
    )
    assert out.detail["after"] != out.detail["taken"]
    assert any("the journal says failed" in m for m in out.verdict.mismatches), out.verdict.summary()


@pytest.mark.redis
def test_with_the_redis_lock_alone_a_redis_restart_lets_two_unwinders_into_one_hook(
    pg_journal: Journal, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str
) -> None:
    redis = OwnRedis(persistent=False)
    redis.start()
    try:
        out = scenarios.redis_restart_mid_hook(
            pg_journal, fault_ledger, worker_env, run_id, redis, extra=("--break", "no-fencing")
        )
    finally:
        redis.close()
    assert out.detail["second"]["entries"][0]["status"] == "compensated"
    assert any("in flight at once" in d for d in out.verdict.double), out.verdict.summary()


def test_without_the_tombstone_check_a_live_run_keeps_executing_after_it_is_condemned(
    pg_journal: Journal, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str
) -> None:
    out = scenarios.live_run_condemned(
        pg_journal, fault_ledger, worker_env, run_id, extra=("--break", "no-tombstone-check")
    )
    assert out.detail["late_calls"], "the broken build should have executed after the tombstone"
    assert out.verdict.after_tombstone, out.verdict.summary()


def test_with_a_compensation_key_that_changes_per_attempt_a_redrive_undoes_the_step_twice(
    pg_journal: Journal,
    fault_ledger: Ledger,
    worker_env: dict[str, str],
    run_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    breaks.apply("unstable-key", monkeypatch.setattr)  # the in-process sweeper re-drives with a new key
    out = scenarios.kill_at_point(
        pg_journal, fault_ledger, worker_env, run_id, "after_hook", extra=("--break", "unstable-key")
    )
    assert out.verdict.double, out.verdict.summary()
    assert any("not the stable key" in m for m in out.verdict.mismatches)
