"""The embedded default: nothing but SQLite files (journal, kombu's SQLAlchemy broker, db+sqlite
results), one `worker -B`. This broker has no visibility timeout, so the beat sweeper is what
finishes a run whose worker was killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from saga_worker import Journal, Tool, ToolCall, run_durable, scripted
from saga_worker.celery import prepare_stores
from saga_worker.core.keys import compensate_key
from saga_worker.journal.records import ClaimStatus, UnwindState
from tests.ledger import Ledger, order_script, order_tools

from . import scenarios
from .conftest import REPO, Setup, Workers, make_setup, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.each_python]


def embedded_setup(tmp: Path) -> Setup:
    setup = make_setup(tmp)
    assert setup.settings().embedded
    client = setup.client()
    prepare_stores(client)
    client.close()
    setup.journal().close()  # migrated before any worker opens it
    return setup


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, module_workers: Workers) -> Setup:
    setup = embedded_setup(tmp_path_factory.mktemp("embedded"))
    module_workers.start(setup, beat=True, concurrency=2)
    return setup


@pytest.fixture
def parts(running: Setup) -> Iterator[tuple[Celery, Journal, Ledger]]:
    client, journal, ledger = running.client(), running.journal(), running.ledger()
    yield client, journal, ledger
    ledger.close()
    journal.close()
    client.close()


def test_embedded_report_over_celery_equals_the_library_report_for_the_same_journal_state(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.report_equals_the_library_report(running, *parts, run_id)


def test_embedded_dry_run_plans_without_condemning(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.dry_run_plans_without_condemning(running, *parts, run_id)


def test_embedded_failing_step_halts_the_chain_with_a_report(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.failing_step_halts_with_a_report(running, *parts, run_id)


def test_embedded_two_delay_calls_for_one_run_at_once_compensate_every_step_exactly_once(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    scenarios.two_unwinds_at_once_compensate_each_step_once(running, *parts, run_id)


def test_embedded_whole_worker_killed_mid_hook_is_finished_by_the_sweeper_with_the_same_key(
    tmp_path: Path, workers: Workers, run_id: str
) -> None:
    setup = embedded_setup(tmp_path)
    first = workers.start(setup, beat=True, concurrency=1)
    client, journal, ledger = setup.client(), setup.journal(), setup.ledger()
    scenarios.place_order(journal, ledger, run_id)
    setup.control_file(run_id, "hang", "reserve")
    client.signature("saga.compensate_run").delay(run_id)
    wait_for(lambda: (setup.control / f"{run_id}.hanging-reserve").exists(), 60, "the reserve hook to start")
    first.kill()  # its message is gone with it: this broker never hands it back
    workers.start(setup, beat=True, concurrency=1)

    def unwound() -> bool:
        run = journal.get_run(run_id)
        return run is not None and run.unwind_state is UnwindState.COMPLETE

    wait_for(unwound, 90, "the sweeper to finish the unwind")
    assert scenarios.compensations(ledger, run_id) == {s: 1 for s in scenarios.SUFFIXES}
    key = compensate_key(run_id, "call-2")
    assert ledger.call_counts("start:reserve")[key] == 2  # killed once, re-driven with the same key
    assert {c.key for c in ledger.calls("start:reserve")} == {key}
    claim = journal.get_claim(run_id, "call-2")
    assert claim is not None and claim.status is ClaimStatus.COMPENSATED and claim.attempts == 2
    run = journal.get_run(run_id)
    assert run is not None and run.unwind_attempts >= 1  # it took a re-drive by the sweeper
    journal.close()
    ledger.close()
    client.close()


def test_demo_places_the_sample_order_and_unwinds_it_on_a_real_embedded_worker(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGA_")}
    env["SAGA_HOME"] = str(tmp_path / ".saga")
    done = subprocess.run(
        [sys.executable, "-m", "saga_worker.cli", "demo", "--run-id", "order-demo", "--json"],
        cwd=tmp_path,
        env=dict(env, COLUMNS="200", PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout[done.stdout.rindex("\n{\n") + 1 :])
    assert report["run_id"] == "order-demo" and report["condemned"] is True
    assert [(e["tool_name"], e["status"]) for e in report["entries"]] == [
        ("send_email", "skipped-no-hook"),
        ("reserve_stock", "compensated"),
        ("charge", "compensated"),
    ]
    assert "refund" in done.stdout and "order-demo:comp:charge" in done.stdout


def test_cli_compensate_enqueues_waits_and_prints_the_report_from_the_worker(
    running: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    _, journal, ledger = parts
    scenarios.place_order(journal, ledger, run_id)
    env = dict(running.env(), COLUMNS="200")
    shown = subprocess.run(
        [sys.executable, "-m", "saga_worker.cli", "compensate", run_id],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "step call-3 (notify): compensated" in shown.stdout  # progress, as the steps land
    as_json = subprocess.run(
        [sys.executable, "-m", "saga_worker.cli", "compensate", run_id, "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    assert scenarios.statuses(json.loads(as_json.stdout)) == ["already-compensated"] * 3


def test_a_worker_names_its_tools_at_start_and_a_step_whose_tool_it_lacks_flags_the_unwind_for_a_person(
    running: Setup, module_workers: Workers, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    log = module_workers.started[0].log.read_text(errors="replace")
    assert (
        "saga-worker tools (SAGA_TOOLS='tests.integration.worker_tools:tools'): "
        "charge, notify, refund, reserve, restock" in log
    )
    tools = {**order_tools(ledger), "gift": Tool(lambda input, opts: {"gift": 1}, lambda i, o, opts: None)}
    calls = [*order_script(), ToolCall("gift", {"to": "c@example.com"})]
    assert run_durable(run_id, journal=journal, tools=tools, planner=scripted(*calls)).status == "finished"

    report = scenarios.unwind(client, run_id)

    assert [(e["tool_name"], e["status"]) for e in report["entries"]] == [
        ("gift", "skipped-no-hook"),
        ("notify", "compensated"),
        ("reserve", "compensated"),
        ("charge", "compensated"),
    ]
    assert report["entries"][0]["tool_missing"] is True
    assert "no tool named 'gift' in this worker's tools" in report["entries"][0]["error"]
    run = journal.get_run(run_id)
    assert run is not None and run.unwind_state is UnwindState.ATTENTION
