"""A newcomer's trap (issue 22): `saga-worker compensate` with no worker running. The report cannot
come; the CLI must say that the request stays queued and will condemn the run whenever a worker takes
it, and how to withdraw it; `saga-worker revoke` withdraws it so that a worker started later does
not condemn the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from saga_worker.celery import prepare_stores

from . import scenarios
from .conftest import REPO, Workers, make_setup

pytestmark = [pytest.mark.celery, pytest.mark.slow]


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "saga_worker.cli", *args],
        cwd=REPO,
        env=dict(env, COLUMNS="300"),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_compensate_with_no_worker_says_the_request_stays_queued_and_revoke_withdraws_it(
    tmp_path: Path, workers: Workers
) -> None:
    setup = make_setup(tmp_path)
    client = setup.client()
    prepare_stores(client)
    with setup.journal() as journal, setup.ledger() as ledger:
        scenarios.place_order(journal, ledger, "order-q1")
        scenarios.place_order(journal, ledger, "order-q2")
    waited = cli(setup.env(), "compensate", "order-q1", "--timeout", "3")
    assert waited.returncode == 1
    [line] = waited.stderr.strip().splitlines()
    assert "no worker has started the unwind" in line and "stays queued on queue" in line
    assert "will condemn run 'order-q1'" in line
    task_id = line.split("(task ", 1)[1].split(")", 1)[0]
    assert f"saga-worker revoke {task_id}" in line

    withdrawn = cli(setup.env(), "revoke", task_id)
    assert withdrawn.returncode == 0, withdrawn.stderr
    assert f"unwind request {task_id} withdrawn" in withdrawn.stdout

    workers.start(setup, concurrency=1)  # one process, one queue: order-q1's request is taken first
    second = client.tasks["saga.compensate_run"].delay("order-q2")
    report = second.get(timeout=90)
    assert report["condemned"] is True
    with setup.journal() as journal:
        q1 = journal.get_run("order-q1")
        assert q1 is not None and not q1.condemned  # the withdrawn request condemned nothing
        assert journal.get_unwind(task_id) is None

    again = cli(setup.env(), "revoke", second.id)  # started (and finished): too late to withdraw
    assert again.returncode == 1 and "has started this unwind" in again.stderr
