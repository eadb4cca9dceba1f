"""Fault scenarios, each returning the checker's verdict, so the smoke tier runs them against the
product and the bite tests run the same ones against a deliberately broken build."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from typing import Any

from saga_worker import Journal

from .checker import Verdict
from .harness import OwnRedis, child, hold_file, start_run, wait_for
from .ledger import Ledger
from .util import judged, settle, unwind


@dataclass
class Outcome:
    verdict: Verdict
    detail: dict[str, Any]


def kill_at_point(
    journal: Journal,
    ledger: Ledger,
    env: dict[str, str],
    run_id: str,
    point: str,
    extra: tuple[str, ...] = (),
) -> Outcome:
    """SIGKILL of the unwinding process at ``point`` of the second step; the sweeper re-drives it."""
    assert start_run(journal, run_id, 3) == "finished"
    key = f"{run_id}:comp:call-2"
    with child(
        "compensate", run_id, env={**env, "SAGA_FAULTS": f"{point}=kill@{key}"}, extra=list(extra)
    ) as proc:
        code = proc.wait()
    killed = time.monotonic()
    waited = settle(journal, ledger, [run_id])
    calls = [c for c in ledger.calls("compensate") if c.step == f"{run_id}:call-2"]
    return Outcome(
        judged(ledger, journal, [run_id], excused_pids=[proc.pid]),
        {"code": code, "redrive_s": time.monotonic() - killed, "settle_s": waited, "calls": calls},
    )


def stopped_holder(
    journal: Journal, ledger: Ledger, env: dict[str, str], run_id: str, extra: tuple[str, ...] = ()
) -> Outcome:
    """SIGSTOP of a claim holder past its lease, a new owner finishes the step, then SIGCONT: the
    late holder's outcome (a failure) must not overwrite the new owner's."""
    assert start_run(journal, run_id, 1) == "finished"
    env = {**env, "SAGA_FAULTS": "before_hook=stop*1,after_hook=raise"}
    with child("compensate", run_id, env=env, extra=list(extra)) as holder:
        wait_for(holder.stopped, 30, "the holder to stop inside its claim")
        claim = journal.get_claim(run_id, "call-1")
        assert claim is not None and str(holder.pid) in claim.owner
        wait_for(lambda: journal.now() > claim.lease_expires_at, 30, "the stopped holder's lease to lapse")
        settle(journal, ledger, [run_id])
        taken = journal.get_claim(run_id, "call-1")
        holder.signal(signal.SIGCONT)
        late = holder.last_json()
    after = journal.get_claim(run_id, "call-1")
    return Outcome(
        judged(ledger, journal, [run_id], excused_pids=[holder.pid]),
        {"holder_pid": holder.pid, "taken": taken, "after": after, "late": late},
    )


def redis_restart_mid_hook(
    journal: Journal,
    ledger: Ledger,
    env: dict[str, str],
    run_id: str,
    redis: OwnRedis,
    extra: tuple[str, ...] = (),
) -> Outcome:
    """The step-lock Redis restarts while a holder is in its hook (its lock lost without persistence):
    a second unwinder gets the Redis lock, and only the journal's claim can still say busy."""
    release = hold_file(run_id)
    assert start_run(journal, run_id, 1, comp_hold=str(release)) == "finished"
    lock = ["--lock", redis.url]
    try:
        with child("compensate", run_id, env=env, extra=lock) as holder:
            wait_for(lambda: ledger.calls("compensate"), 30, "the holder's hook to start")
            redis.restart()
            with child("compensate", run_id, env=env, extra=[*lock, *extra]) as second:
                # It answers (busy), or, in a build without fencing, enters the hook beside the holder.
                wait_for(
                    lambda: second.popen.poll() is not None or len(ledger.calls("compensate")) > 1,
                    60,
                    "the second unwinder to answer or to enter the hook",
                )
                release.touch()  # only now may the hooks return
                report = second.last_json()
            assert holder.wait() == 0
    finally:
        release.unlink(missing_ok=True)
    settle(journal, ledger, [run_id])
    return Outcome(judged(ledger, journal, [run_id]), {"second": report})


def live_run_condemned(
    journal: Journal, ledger: Ledger, env: dict[str, str], run_id: str, extra: tuple[str, ...] = ()
) -> Outcome:
    """Condemn a run while its second call executes in another process; it must stop there, and
    the call in flight must still be undone once it lands."""
    env = {**env, "SAGA_FAULTS": f"mid_execute=sleep:2@{run_id}:call-2"}
    with child("run", run_id, env=env, extra=["--steps", "4", *extra]) as runner:
        wait_for(
            lambda: any(c.step == f"{run_id}:call-2" for c in ledger.calls("execute")),
            30,
            "the live run's second call to start",
        )
        unwind(journal, ledger, run_id)  # the tombstone lands while call-2 executes
        out = runner.last_json()
    settle(journal, ledger, [run_id])  # the sweeper, for as long as the journal says work is left
    late = [c.step for c in ledger.calls("execute") if c.step in (f"{run_id}:call-3", f"{run_id}:call-4")]
    return Outcome(judged(ledger, journal, [run_id]), {"runner": out, "late_calls": late})


def celery_kill_pool_child(
    dep: Any, journal: Journal, ledger: Ledger, run_id: str, point: str, *, break_: str = "", wait: float = 60
) -> Outcome:
    """SIGKILL of the pool child running step call-2 at ``point``; no beat: redelivery alone must
    finish the unwind, and the caller must still get the report (within ``wait`` seconds)."""
    from .harness import arm, fired

    assert start_run(journal, run_id, 3) == "finished"
    arm(dep.fault_dir, f"{point}=kill@{run_id}:comp:call-2")
    extra = {"FAULT_BREAK": break_} if break_ else {}
    dep.start_worker(**extra)
    report, error = None, ""
    try:
        report = dep.send(run_id).get(timeout=wait)
        ledger.add_report(run_id, report)
    except Exception as exc:  # the caller got an error instead of the report
        error = f"{type(exc).__name__}: {exc}"
    pids = [f[1] for f in fired(dep.fault_dir)]
    calls = [c for c in ledger.calls("compensate") if c.step == f"{run_id}:call-2"]
    return Outcome(
        judged(ledger, journal, [run_id], excused_pids=pids),
        {"report": report, "error": error, "fired": pids, "calls": calls},
    )
