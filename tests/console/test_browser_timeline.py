"""Issue 49 in a real headless Chromium against a real worker, at 1280 and 390 px: a run's page as one
timeline (its calls, each undo with its Flower task, the unwind, the trail), cards on a phone with the
status and error first; and a bulk compensate from a filtered runs list, confirmed with its count."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from saga_worker import Journal, compensate_run
from saga_worker.journal.records import UnwindState
from tests.integration.scenarios import place_order
from tests.ledger import Ledger, order_tools
from tests.reads import run_of

from .conftest import DOCS, Deployment, Tokens

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]
pytest.importorskip("playwright")
from playwright.sync_api import Page, ViewportSize, expect  # noqa: E402

WAIT_MS = 60_000
expect.set_options(timeout=WAIT_MS)
FLOWER = "http://flower.example:5555"
WIDE: ViewportSize = {"width": 1280, "height": 900}
PHONE: ViewportSize = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def console_env() -> dict[str, str]:
    """The console's other browser tests' deployment, with Flower's address set."""
    return {"SAGA_FLOWER_URL": FLOWER}


def logged_in(chromium: Any, deployment: Deployment, token: str) -> Page:
    page: Page = chromium.new_context(viewport=WIDE).new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(deployment.console.url + "/")
    page.fill("#token", token)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Runs")
    return page


def test_a_runs_timeline_tells_calls_undos_on_the_workers_and_in_process_and_the_trail(
    deployment: Deployment, chromium: Any, tokens: Tokens, journal_and_ledger: tuple[Journal, Ledger]
) -> None:
    journal, ledger = journal_and_ledger
    run_id = f"story-{uuid.uuid4().hex[:6]}"
    place_order(journal, ledger, run_id)
    page = logged_in(chromium, deployment, tokens.operator)
    page.goto(f"{deployment.console.url}/runs/{run_id}")
    page.click("#dry-run")
    page.fill("#reason", "the customer cancelled")
    page.click("#compensate")
    events = page.locator("#timeline li.event")
    undos = page.locator("#timeline li.compensation")
    expect(undos).to_have_count(3)
    expect(page.locator("#unwind-state")).to_have_text("complete")
    expect(undos.locator(".badge")).to_have_text(["compensated"] * 3)
    # In order: the run, its three calls, then what undid them; each undo links to its step's task.
    kinds = events.evaluate_all("els => els.map(e => e.dataset.kind)")
    assert kinds[:4] == ["run", "call", "call", "call"] and kinds.count("audit") >= 2
    times = events.evaluate_all("els => els.map(e => parseFloat(e.dataset.at))")
    assert times == sorted(times)
    links = undos.locator("a.flower")
    expect(links).to_have_count(3)
    for href in links.evaluate_all("els => els.map(e => e.getAttribute('href'))"):
        assert href.startswith(f"{FLOWER}/task/{run_id}:") and ":call-" in href
    expect(page.locator("#timeline li.unwind a.flower")).to_have_count(1)
    expect(page.locator("#timeline li.audit").filter(has_text="unwind queued")).to_contain_text(
        "the customer cancelled"
    )
    DOCS.mkdir(exist_ok=True)
    page.screenshot(path=str(DOCS / "console-timeline.png"), full_page=True)

    # An unwind in process (compensate_run, `saga-worker compensate --local`) is on the timeline too.
    here = f"local-{uuid.uuid4().hex[:6]}"
    place_order(journal, ledger, here)
    compensate_run(
        here, journal=journal, tools=order_tools(ledger), actor="ops", reason="done here", via="cli"
    )
    page.goto(f"{deployment.console.url}/runs/{here}")
    expect(page.locator("#timeline li.compensation")).to_contain_text(["in process"] * 3)
    expect(page.locator("#timeline li.audit").filter(has_text="unwound in process")).to_have_count(1)

    # On a phone the page is cards: the status (and an error, when there is one) first, no table
    # scrolling sideways.
    page.set_viewport_size(PHONE)
    page.goto(f"{deployment.console.url}/runs/{run_id}")
    expect(page.locator("#steps")).to_be_hidden()
    expect(page.locator("#timeline")).to_be_visible()
    status, timeline = page.locator("#run-status").bounding_box(), page.locator("#timeline").bounding_box()
    assert status is not None and timeline is not None and status["y"] < timeline["y"]
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=str(DOCS / "console-timeline-phone.png"), full_page=True)


def test_a_bulk_compensate_from_a_filtered_list_names_its_count_then_queues_each_run_once(
    deployment: Deployment, chromium: Any, tokens: Tokens, journal_and_ledger: tuple[Journal, Ledger]
) -> None:
    journal, ledger = journal_and_ledger
    batch = f"deploy-{uuid.uuid4().hex[:6]}"
    runs = [f"{batch}-{n}" for n in range(3)]
    for run_id in runs:
        place_order(journal, ledger, run_id)
    place_order(journal, ledger, f"keep-{uuid.uuid4().hex[:6]}")
    page = logged_in(chromium, deployment, tokens.operator)
    page.fill("input[name=search]", batch)
    page.click("text=Filter")
    expect(page.locator("table.runs tbody tr")).to_have_count(3)
    page.click("#bulk summary")
    page.select_option("select[name=action]", "compensate")
    page.click("#bulk-review")
    expect(page.locator("#bulk-count")).to_have_text("3")
    expect(page.locator("ul.bulk-runs li")).to_have_count(3)
    expect(page.locator("#bulk-go")).to_have_text("Yes, compensate 3 runs")
    page.fill("#reason", "a bad deploy charged twice")
    page.screenshot(path=str(DOCS / "console-bulk.png"), full_page=True)
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=str(DOCS / "console-bulk-phone.png"), full_page=True)
    page.set_viewport_size(WIDE)
    assert not any(run_of(journal, r).condemned for r in runs), "a review does nothing"
    page.click("#bulk-go")
    expect(page.locator("#summary")).to_contain_text("3 done, 0 skipped")

    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline and not all(
        run_of(journal, r).unwind_state is UnwindState.COMPLETE for r in runs
    ):
        time.sleep(0.2)  # the workers unwind them; the list page does not update itself
    page.goto(f"{deployment.console.url}/?search={batch}&unwind=complete")
    expect(page.locator("table.runs tbody tr")).to_have_count(3)
    undone = {c.key for c in ledger.effects() if c.key.startswith(batch) and ":comp:" in c.key}
    assert len(undone) == 9
    for run_id in runs:  # each queued once: one unwind-queued row, one unwind
        trail = [a.action.value for a in journal.read_audit(run_id)]
        assert trail.count("unwind-queued") == 1 and trail.count("condemned") == 1
