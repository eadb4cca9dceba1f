"""The console says how big the journal is and which run is its oldest (retention's measure), and
shows a pruned run as the stub it is."""

from __future__ import annotations

import time
import uuid

from starlette.testclient import TestClient

from saga_worker import run_durable, scripted
from saga_worker.operating.retention import prune
from tests.console.clients import bearer, console_journal

from .conftest import Tokens


def test_the_runs_page_shows_the_journals_size_and_its_oldest_run(app: TestClient, tokens: Tokens) -> None:
    journal = console_journal(app)
    first = f"old-{uuid.uuid4().hex[:8]}"
    for run_id in (first, f"new-{uuid.uuid4().hex[:8]}", f"new-{uuid.uuid4().hex[:8]}"):
        run_durable(run_id, journal=journal, tools={}, planner=scripted(final="done"))
    page = app.get("/", headers=bearer(tokens.viewer)).text
    size = journal.journal_size()
    assert f'data-runs="{size.runs}"' in page and f"Journal: {size.runs:,} run" in page
    assert size.oldest_run_id == first and 'the oldest last updated <span id="oldest-run"><time' in page


def test_a_pruned_run_reads_as_a_stub_on_its_page_and_in_the_api(app: TestClient, tokens: Tokens) -> None:
    journal = console_journal(app)
    run_id = f"gone-{uuid.uuid4().hex[:8]}"
    run_durable(run_id, journal=journal, tools={}, planner=scripted(final="done"))
    time.sleep(0.02)
    prune(journal, 0.01)
    body = app.get(f"/api/runs/{run_id}", headers=bearer(tokens.viewer)).json()
    assert body["run"]["pruned_at"] is not None and body["steps"] == []
    page = app.get(f"/runs/{run_id}", headers=bearer(tokens.viewer)).text
    assert "pruned" in page and "stub" in page
