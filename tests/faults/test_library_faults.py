"""Smoke tier, library level: real worker processes against a real PostgreSQL journal, a fault at
each point, and the checker's verdict from the ledger (docs/reference/compensation.md, docs/reference/safety.md)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from saga_worker import Journal, open_journal
from saga_worker.journal.records import ClaimStatus

from . import scenarios
from .harness import OwnRedis, child, hold_file, start_run, wait_for
from .ledger import Ledger
from .proxy import TcpProxy
from .util import assert_clean, judged, settle

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

KILL_POINTS = ["after_claim", "before_hook", "mid_hook", "after_hook", "before_next_claim", "after_outcome"]


@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_at_each_point_loses_no_compensation_and_redrives_with_the_same_key(
    point: str, pg_journal: Journal, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str
) -> None:
    out = scenarios.kill_at_point(pg_journal, fault_ledger, worker_env, run_id, point)
    assert out.detail["code"] == -signal.SIGKILL
    assert_clean(out.verdict)
    assert out.detail["redrive_s"] < 30
    calls = out.detail["calls"]
    assert {c.key for c in calls} == {f"{run_id}:comp:call-2"}, (
        "the re-drive must use the same idempotency key"
    )
    # Killed once the hook had run (or mid-hook), or before its outcome's commit (the in-process
    # unwind writes it with the next step's claim): the re-drive calls again and the provider deduplicates.
    assert len(calls) == (2 if point in ("mid_hook", "after_hook", "before_next_claim") else 1)


def test_a_kill_inside_the_merged_commit_on_sqlite_leaves_neither_write_and_loses_nothing(
    tmp_path: Path, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str
) -> None:
    # SQLite writes a step's outcome and the next step's claim as statements of one transaction (the
    # claim in a savepoint): a kill between them commits neither, so the step is still claimed by the
    # dead process, the next one unclaimed, and a re-drive calls the hook again with the same key.
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    journal = open_journal(url, migrate=True)
    try:
        assert start_run(journal, run_id, 3) == "finished"
        key = f"{run_id}:comp:call-2"
        env = {**worker_env, "SAGA_JOURNAL_URL": url, "SAGA_FAULTS": f"before_next_claim=kill@{key}"}
        with child("compensate", run_id, env=env) as proc:
            code = proc.wait()
        assert code == -signal.SIGKILL
        killed_in = journal.get_claim(run_id, "call-2")
        assert killed_in is not None and killed_in.status is ClaimStatus.CLAIMED  # its outcome: not committed
        assert str(proc.pid) in killed_in.owner
        assert journal.get_claim(run_id, "call-1") is None  # the next claim: not committed either
        done = journal.get_claim(run_id, "call-3")
        assert done is not None and done.status is ClaimStatus.COMPENSATED  # the steps before: kept
        settle(journal, fault_ledger, [run_id])
        assert_clean(judged(fault_ledger, journal, [run_id], excused_pids=[proc.pid]))
        calls = [c for c in fault_ledger.calls("compensate") if c.step == f"{run_id}:call-2"]
        assert [c.key for c in calls] == [key, key]  # the same key, deduplicated by the provider
        assert all(
            c.status is ClaimStatus.COMPENSATED
            for c in journal.get_claims([(run_id, f"call-{i}") for i in (1, 2, 3)]).values()
        )
    finally:
        journal.close()


def _kill_after_the_first_commit(
    journal: Journal, fault_ledger: Ledger, env: dict[str, str], run_id: str
) -> None:
    """SIGKILL right after the tombstone and the first step's claim are committed together, before
    the first hook: the run stays condemned, the step claimed by the dead process and nothing else
    written; the sweeper re-drives it once the lease lapses, with the same key, once."""
    assert start_run(journal, run_id, 3) == "finished"
    key = f"{run_id}:comp:call-3"  # the first step to undo: the latest
    with child("compensate", run_id, env={**env, "SAGA_FAULTS": f"after_first_claim=kill@{key}"}) as proc:
        code = proc.wait()
    assert code == -signal.SIGKILL
    run = journal.get_run(run_id)
    assert run is not None and run.condemned  # the tombstone: committed
    first = journal.get_claim(run_id, "call-3")
    assert first is not None and first.status is ClaimStatus.CLAIMED and str(proc.pid) in first.owner
    assert first.idempotency_key == key
    assert journal.get_claim(run_id, "call-2") is None and journal.get_claim(run_id, "call-1") is None
    assert fault_ledger.calls("compensate") == []  # no hook ran
    settle(journal, fault_ledger, [run_id])
    assert_clean(judged(fault_ledger, journal, [run_id], excused_pids=[proc.pid]))
    calls = [c for c in fault_ledger.calls("compensate") if c.step == f"{run_id}:call-3"]
    assert [c.key for c in calls] == [key]  # re-driven with the same key, called once
    assert all(
        c.status is ClaimStatus.COMPENSATED
        for c in journal.get_claims([(run_id, f"call-{i}") for i in (1, 2, 3)]).values()
    )
    run = journal.get_run(run_id)
    assert run is not None and run.condemned


def test_a_kill_after_the_tombstone_and_first_claim_on_postgres_loses_nothing(
    pg_journal: Journal, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str
) -> None:
    _kill_after_the_first_commit(pg_journal, fault_ledger, worker_env, run_id)


def test_a_kill_after_the_tombstone_and_first_claim_on_sqlite_loses_nothing(
    tmp_path: Path, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str
) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    journal = open_journal(url, migrate=True)
    try:
        _kill_after_the_first_commit(journal, fault_ledger, {**worker_env, "SAGA_JOURNAL_URL": url}, run_id)
    finally:
        journal.close()


def test_a_stopped_holder_past_its_lease_cannot_overwrite_the_new_owners_outcome(
    pg_journal: Journal, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str
) -> None:
    out = scenarios.stopped_holder(pg_journal, fault_ledger, worker_env, run_id)
    taken, holder = out.detail["taken"], str(out.detail["holder_pid"])
    assert taken.status.value == "compensated" and holder not in taken.owner
    assert out.detail["late"]["entries"][0]["status"] == "failed"  # its own attempt, honestly
    assert out.detail["after"] == taken, "the late holder overwrote the new owner's outcome"
    assert_clean(out.verdict)


@pytest.mark.redis
@pytest.mark.parametrize("persistent", [False, True], ids=["no-persistence", "aof"])
def test_a_redis_restart_mid_hook_never_lets_a_second_unwinder_in(
    persistent: bool, pg_journal: Journal, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str
) -> None:
    redis = OwnRedis(persistent=persistent)
    redis.start()
    try:
        out = scenarios.redis_restart_mid_hook(pg_journal, fault_ledger, worker_env, run_id, redis)
    finally:
        redis.close()
    assert out.detail["second"]["entries"][0]["status"] == "busy"
    assert len(fault_ledger.calls("compensate")) == 1
    assert_clean(out.verdict)


def test_a_cut_database_connection_mid_hook_is_redriven_and_loses_nothing(
    pg_url: str, pg_journal: Journal, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str
) -> None:
    start_run(pg_journal, run_id, 3, comp_sleep=1.0)
    port = int(pg_url.split("@127.0.0.1:")[1].split("/")[0])
    with TcpProxy(port) as proxy:
        proxied = pg_url.replace(f"127.0.0.1:{port}", f"127.0.0.1:{proxy.port}")
        with child("compensate", run_id, env={**worker_env, "SAGA_JOURNAL_URL": proxied}) as proc:
            wait_for(
                lambda: any(c.step == f"{run_id}:call-2" for c in fault_ledger.calls("compensate")),
                30,
                "the second step's hook to start",
            )
            proxy.pause()
            assert proxy.open_connections == 0
            time.sleep(1.5)  # the hook returns while the journal is unreachable
            proxy.resume()
            proc.output()
            assert proc.popen.returncode != 0, (
                "the outcome could not be written: the call must not claim success"
            )
            assert "OperationalError" in proc.stderr or "connection" in proc.stderr.lower()
    cleared = time.monotonic()
    settle(pg_journal, fault_ledger, [run_id])
    assert time.monotonic() - cleared < 30
    assert_clean(judged(fault_ledger, pg_journal, [run_id]))


def test_eight_concurrent_unwinds_of_one_run_call_each_hook_once(
    pg_journal: Journal, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str, tmp_path: Path
) -> None:
    start_run(pg_journal, run_id, 5, comp_sleep=0.2)
    go = tmp_path / "go"
    procs = [child("compensate", run_id, env=worker_env, extra=["--go", str(go)]) for _ in range(8)]
    try:
        go.touch()
        reports = [p.last_json() for p in procs]
    finally:
        for p in procs:
            p.__exit__()
    statuses = [e["status"] for r in reports for e in r["entries"]]
    assert statuses.count("compensated") == 5, statuses
    settle(pg_journal, fault_ledger, [run_id])
    verdict = judged(fault_ledger, pg_journal, [run_id])
    assert_clean(verdict)
    assert verdict.calls_per_step == [1] * 5


def test_a_worker_whose_clock_is_minutes_ahead_cannot_steal_a_live_lease(
    pg_journal: Journal, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str
) -> None:
    release = hold_file(run_id)  # the hook outlives the 2 s lease until released: renewals keep it
    start_run(pg_journal, run_id, 1, comp_hold=str(release))
    try:
        with child("compensate", run_id, env=worker_env) as holder:
            wait_for(lambda: fault_ledger.calls("compensate"), 30, "the holder's hook to start")
            time.sleep(2.5)  # past one whole lease: only renewals keep it alive now
            for skew in ("600", "-600"):
                with child("compensate", run_id, env=worker_env, extra=["--skew", skew]) as thief:
                    report = thief.last_json()
                assert report["entries"][0]["status"] == "busy", (skew, report)
            release.touch()
            assert holder.wait() == 0
    finally:
        release.unlink(missing_ok=True)
    assert len(fault_ledger.calls("compensate")) == 1
    assert_clean(judged(fault_ledger, pg_journal, [run_id]))


def test_a_run_live_when_condemned_starts_no_side_effect_after_the_tombstone_and_loses_none(
    pg_journal: Journal, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str
) -> None:
    out = scenarios.live_run_condemned(pg_journal, fault_ledger, worker_env, run_id)
    assert out.detail["runner"]["status"] == "condemned"
    assert out.detail["late_calls"] == []
    assert_clean(out.verdict)
