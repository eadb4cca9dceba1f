"""The inbox's stuck lane and the fleet in the header in a real headless Chromium (issue 48, items 1
and 3), at a desktop's 1,280 px and a phone's 390 px: an unwind halted at a failed refund and a
compensate no worker took are listed in a colour of their own with their step, attempts, error and
what happens next; Re-drive now hands the halted one back to the workers; the header names the
worker and the queue's depth, and shows beat (not running here) overdue in red."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from saga_worker import Journal, compensate_run
from tests.integration.scenarios import place_order
from tests.integration.worker_tools import before_compensate
from tests.ledger import Ledger, order_tools

from .conftest import DOCS, ConsoleServer, Deployment, Tokens

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]
pytest.importorskip("playwright")
from playwright.sync_api import Page, expect  # noqa: E402

WAIT_MS = 60_000
expect.set_options(timeout=WAIT_MS)


def logged_in(chromium: Any, url: str, token: str, width: int) -> Page:
    context = chromium.new_context(viewport={"width": width, "height": 900})
    page: Page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(url + "/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Runs")
    return page


def halted(deployment: Deployment, journal: Journal, ledger: Ledger) -> str:
    """An order whose reserve refund the provider refuses (every time: the worker's re-drives fail too)."""
    run_id = f"order-refused-{uuid.uuid4().hex[:6]}"
    place_order(journal, ledger, run_id)
    deployment.setup.control_file(run_id, "fail", "reserve")

    def failing(name: str, input: Any, output: Any, opts: Any) -> None:
        before_compensate(ledger, name, opts, deployment.setup.control)

    report = compensate_run(run_id, journal=journal, tools=order_tools(ledger, before_compensate=failing))
    assert report.halt is not None and report.halt.value == "failed"
    return run_id


@pytest.mark.parametrize("width", [1280, 390])
def test_the_stuck_lane_shows_a_failed_refund_and_an_unstarted_compensate_in_their_own_colour(
    deployment: Deployment,
    chromium: Any,
    tokens: Tokens,
    journal_and_ledger: tuple[Journal, Ledger],
    width: int,
) -> None:
    journal, ledger = journal_and_ledger
    refused = halted(deployment, journal, ledger)
    queue = f"nobody-{uuid.uuid4().hex[:8]}"  # a console sending where no worker listens
    idle = ConsoleServer(
        deployment.setup, tokens, deployment.tmp / f"console-idle-{width}.log", SAGA_QUEUE=queue
    )
    try:
        waiting = f"order-queued-{uuid.uuid4().hex[:6]}"
        place_order(journal, ledger, waiting)
        page = logged_in(chromium, idle.url, tokens.operator, width)
        page.goto(f"{idle.url}/runs/{waiting}")
        page.click("#dry-run")
        page.fill("#reason", "customer cancelled")
        page.click("#compensate")
        expect(page.locator("#queued")).to_contain_text(f"no worker consumes queue '{queue}'")
    finally:
        idle.stop()

    page = logged_in(chromium, deployment.console.url, tokens.operator, width)
    expect(page.locator("#stuck-total")).to_contain_text("stuck")
    page.click("#stuck-total")
    lane = page.locator("#stuck-lane")
    failed = lane.locator(f"tr[data-run={refused}]")
    expect(failed).to_have_attribute("data-why", "failed")
    expect(failed).to_contain_text("reserve")
    expect(failed).to_contain_text("after 1 attempt")
    expect(failed).to_contain_text("the provider refused the compensation")
    expect(failed).to_contain_text(re.compile(r"(due for the sweeper since|next sweep in) \d+ s"))
    queued = lane.locator(f"tr[data-run={waiting}]")
    expect(queued).to_have_attribute("data-why", "queued")
    expect(queued).to_contain_text(re.compile(r"queued \d+ s ago, not started"))
    expect(queued.locator("button")).to_have_count(0)  # nothing to re-drive: a worker starts it

    # Its own colour: not the amber of a run waiting for a person.
    stuck_bg = failed.locator(".badge.stuck").evaluate("b => getComputedStyle(b).backgroundColor")
    amber = page.evaluate(
        "() => { const b = document.createElement('span'); b.className = 'badge warn';"
        " document.body.append(b); const c = getComputedStyle(b).backgroundColor; b.remove(); return c; }"
    )
    assert stuck_bg != amber, (stuck_bg, amber)
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"the inbox is {scroll} px wide at {width} px"
    # The fleet in the header: the deployment's worker runs no beat, so no sweep is recorded: overdue, red.
    fleet = page.locator("#fleet")
    expect(fleet.locator("#fleet-workers")).to_have_text("1 worker")
    expect(fleet.locator("#fleet-depth")).to_have_text(re.compile(r"queue \d+"))
    expect(fleet).to_have_attribute("data-overdue", "yes")
    expect(fleet.locator("#fleet-beat")).to_contain_text("overdue")
    box = fleet.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, box
    red = fleet.evaluate("f => getComputedStyle(f).backgroundColor")
    assert red == "rgb(180, 35, 24)", red  # --bad
    name = "console-stuck.png" if width == 1280 else "console-stuck-phone.png"
    DOCS.mkdir(exist_ok=True)
    page.locator("#stuck").scroll_into_view_if_needed()
    page.screenshot(path=str(DOCS / name), full_page=True)

    failed.locator("button", has_text="Re-drive now").click()
    expect(page.locator("body")).to_contain_text(f"Re-drive of {refused} queued on the workers")
