"""Smoke tier, Celery level, parallel unwinds (docs/reference/compensation.md, "Groups"): a group's
steps run as step tasks side by side on real workers (prefork pool), and under a worker killed
mid-group, a group's step delivered twice and a condemn racing the group's calls, the ledger shows
every effect undone exactly once with its one key, and nothing executed after the tombstone."""

from __future__ import annotations

import time
from typing import Any

import pytest

from saga_worker import Journal

from .deployment import Deployment
from .harness import arm, child, fired, start_grouped_run, wait_for
from .ledger import Ledger
from .util import assert_clean, judged, settle

pytestmark = [pytest.mark.celery, pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

GROUP = 3  # call-2, call-3, call-4: one group between call-1 and call-5
SETTLED = {"compensated", "already-compensated"}


def groups_of(report: dict[str, Any]) -> list[tuple[int, str]]:
    return [(e["group"], e["suffix"]) for e in report["entries"]]


def test_a_group_runs_side_by_side_and_a_worker_killed_mid_group_loses_and_doubles_nothing(
    deployment: Deployment, pg_journal: Journal, fault_ledger: Ledger, run_id: str
) -> None:
    assert start_grouped_run(pg_journal, run_id, GROUP) == "finished"
    # Each hook of the group stops inside itself (SIGSTOP) before its effect: the three can only all
    # be there at once if the worker runs them side by side, each in its own pool child.
    for n in range(2, GROUP + 2):
        arm(deployment.fault_dir, f"mid_hook=stop@{run_id}:comp:call-{n}")
    first = deployment.start_worker(concurrency=GROUP)
    result = deployment.send(run_id, parallel=True)
    wait_for(lambda: len(fired(deployment.fault_dir)) == GROUP, 60, "the group's three hooks to be in flight")
    assert not any(c.step == f"{run_id}:call-1" for c in fault_ledger.calls("compensate"))  # book waits
    first.kill()
    deployment.start_worker(concurrency=GROUP)
    report = result.get(timeout=120)
    fault_ledger.add_report(run_id, report)

    assert {e["status"] for e in report["entries"]} <= SETTLED, report
    assert sorted(groups_of(report)) == sorted(
        [(3, "call-5"), (2, "call-4"), (2, "call-3"), (2, "call-2"), (1, "call-1")]
    )
    assert groups_of(report)[0] == (3, "call-5") and groups_of(report)[-1] == (1, "call-1")
    verdict = judged(
        fault_ledger, pg_journal, [run_id], excused_pids=[f[1] for f in fired(deployment.fault_dir)]
    )
    assert_clean(verdict)


def test_a_groups_step_delivered_twice_and_the_whole_unwind_sent_twice_undo_each_effect_once(
    deployment: Deployment, pg_journal: Journal, fault_ledger: Ledger, run_id: str
) -> None:
    assert start_grouped_run(pg_journal, run_id, GROUP, comp_sleep=0.3) == "finished"
    worker = deployment.start_worker(concurrency=GROUP)
    task_id = f"dup-{run_id}"
    first = deployment.send(run_id, task_id=task_id, parallel=True)
    deployment.send(run_id, task_id=task_id, parallel=True)  # the very same message, twice
    report = first.get(timeout=60)
    fault_ledger.add_report(run_id, report)
    unwind = pg_journal.list_unwinds(run_id)[0]
    assert unwind.groups is not None and unwind.groups.sizes == (1, GROUP, 1)

    # A group's step sent again once all is done: it finds its entry and only goes on.
    client = deployment.client()
    again = client.send_task("saga.compensate_step", args=[run_id, unwind.unwind_id, "call-3"])
    wait_for(lambda: f"{again.id}] succeeded" in worker.log.read_text(), 30, "the step sent again to end")
    time.sleep(1.0)  # let any duplicate continuation drain: each must find its step done
    verdict = judged(fault_ledger, pg_journal, [run_id])
    assert_clean(verdict)
    assert verdict.calls_per_step == [1] * (GROUP + 2)
    assert {e["status"] for e in report["entries"]} == {"compensated"}


def test_a_condemn_racing_a_groups_calls_stops_the_run_and_every_effect_is_undone_once(
    deployment: Deployment, pg_journal: Journal, fault_ledger: Ledger, worker_env: dict[str, str], run_id: str
) -> None:
    deployment.start_worker(concurrency=GROUP)
    # The group's calls execute for 2 s each, side by side, in a process of their own.
    env = {**worker_env, "SAGA_FAULTS": f"mid_execute=sleep:2@{run_id}:call-"}
    with child("run", run_id, env=env, extra=["--group", str(GROUP)]) as runner:
        wait_for(
            lambda: sum(c.step.startswith(f"{run_id}:call-") for c in fault_ledger.calls("execute")) >= 2,
            30,
            "the group's calls to be executing",
        )
        report = deployment.send(run_id, parallel=True).get(timeout=60)  # the tombstone lands mid-group
        fault_ledger.add_report(run_id, report)
        out = runner.last_json()
    assert out["status"] in {"condemned", "finished"}, out
    settle(pg_journal, fault_ledger, [run_id])  # the sweeper, for the calls that landed after the report
    late = [c.step for c in fault_ledger.calls("execute") if c.step == f"{run_id}:call-{GROUP + 2}"]
    verdict = judged(fault_ledger, pg_journal, [run_id])
    assert_clean(verdict)
    assert late == [], "a call started after the tombstone"


def by_group(report: dict[str, Any]) -> list[tuple[int, dict[str, str]]]:
    """The report's groups in its order, each with its steps' statuses (within a group the order is
    the reverse of recording, which threads racing to record decide)."""
    out: list[tuple[int, dict[str, str]]] = []
    for e in report["entries"]:
        if not out or out[-1][0] != e["group"]:
            out.append((e["group"], {}))
        out[-1][1][e["suffix"]] = e["status"]
    return out


def test_a_failed_step_lets_its_group_finish_the_redrive_ends_it_with_the_same_keys_and_a_dry_run_plans_it(
    deployment: Deployment, pg_journal: Journal, fault_ledger: Ledger, run_id: str
) -> None:
    assert start_grouped_run(pg_journal, run_id, GROUP, fail=[3]) == "finished"
    failing = next(r.suffix for r in pg_journal.list_records(run_id) if r.input["n"] == 3)
    deployment.start_worker(concurrency=GROUP)
    plan = deployment.send(run_id, parallel=True, dry_run=True).get(timeout=60)
    would = "would-compensate"
    assert by_group(plan) == [
        (3, {"call-5": would}),
        (2, {"call-2": would, "call-3": would, "call-4": would}),
        (1, {"call-1": would}),
    ]
    assert fault_ledger.calls("compensate") == []

    first = deployment.send(run_id, parallel=True).get(timeout=60)
    fault_ledger.add_report(run_id, first)
    middle = {s: "compensated" for s in ("call-2", "call-3", "call-4")}
    assert by_group(first) == [
        (3, {"call-5": "compensated"}),
        (2, {**middle, failing: "failed"}),
        (1, {"call-1": "not-attempted"}),
    ]
    again = deployment.send(run_id, parallel=True).get(timeout=60)
    fault_ledger.add_report(run_id, again)
    assert by_group(again) == [
        (3, {"call-5": "already-compensated"}),
        (2, {**{s: "already-compensated" for s in middle}, failing: "compensated"}),
        (1, {"call-1": "compensated"}),
    ]
    keys = {e["suffix"]: e["idempotency_key"] for e in first["entries"]}
    assert {e["suffix"]: e["idempotency_key"] for e in again["entries"]} == keys
    verdict = judged(fault_ledger, pg_journal, [run_id])
    assert_clean(verdict)
