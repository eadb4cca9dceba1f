"""The soak tier (``make soak``): at least 1,000 condemned runs through real Celery workers while
every kind of fault lands, judged by the checker. Prints the table of issue 5."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from saga_worker import open_journal

from .deployment import Deployment
from .harness import OwnPostgres
from .ledger import Ledger
from .soak import Plan, Soak

pytestmark = [pytest.mark.soak, pytest.mark.celery, pytest.mark.postgres, pytest.mark.redis]


@pytest.mark.timeout(3600)
def test_soak_loses_nothing_doubles_nothing_and_every_report_is_true(
    deployment: Deployment, fault_ledger: Ledger, tmp_path: Path
) -> None:
    pg = OwnPostgres()
    pg.init()
    try:
        journal = open_journal(pg.url, migrate=True)
        deployment.journal_url = pg.url
        deployment.start_worker(beat=True, concurrency=2, SAGA_SWEEP_MAX_ATTEMPTS="30")
        deployment.start_worker(concurrency=2, SAGA_SWEEP_MAX_ATTEMPTS="30")
        soak = Soak(deployment, pg, journal, fault_ledger, Plan())
        soak.run()
        verdict = soak.verdict()
        table = soak.table(verdict)
        print("\n" + table)
        for crash in soak.crashes[:3]:
            print("worker crash (restarted):\n" + crash)
        (Path(os.environ.get("SAGA_SOAK_TABLE", str(tmp_path / "soak-table.txt")))).write_text(table + "\n")
        assert verdict.clean, verdict.summary() + "\n" + soak.diagnose(verdict)
        assert soak.fig.unfinished == 0 and soak.fig.attention == 0
        lat = sorted(soak.fig.latencies)
        assert not lat or lat[min(len(lat) - 1, int(0.99 * (len(lat) - 1)))] < 30
        journal.close()
    finally:
        for worker in deployment.workers:
            worker.kill()
        pg.close()
