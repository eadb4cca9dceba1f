"""The operator's chair in a real headless Chromium (issue 23): the inbox across runs and decisions
taken from it, the layout at a phone's 390 px and a desktop's 1,440 px with 200-character ids, and
what Compensate says when no worker consumes the queue."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from saga_worker import Journal, ToolCall, compensate_run, run_durable, scripted
from saga_worker.journal.records import RecordStatus, UnwindState
from tests.integration.scenarios import place_order
from tests.integration.worker_tools import approval_tools
from tests.ledger import Ledger, order_tools
from tests.reads import record_of, run_of

from .conftest import DOCS, ConsoleServer, Deployment, Tokens

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]
pytest.importorskip("playwright")
from playwright.sync_api import Page, expect  # noqa: E402

WAIT_MS = 60_000
expect.set_options(timeout=WAIT_MS)


def logged_in(chromium: Any, url: str, token: str, width: int = 1440, height: int = 900) -> Page:
    context = chromium.new_context(viewport={"width": width, "height": height})
    page: Page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(url + "/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Runs")
    return page


def test_an_operator_approves_a_suspended_call_and_a_gated_step_from_the_inbox(
    deployment: Deployment, chromium: Any, tokens: Tokens, journal_and_ledger: tuple[Journal, Ledger]
) -> None:
    journal, ledger = journal_and_ledger
    tools = {**order_tools(ledger), **approval_tools(ledger)}
    waiting = f"refund-{uuid.uuid4().hex[:6]}"
    script = scripted(ToolCall("charge", {"amount": 10}), ToolCall("refund", {"amount": 500}))
    assert run_durable(waiting, journal=journal, tools=tools, planner=script).status == "suspended"
    gated = f"order-gated-{uuid.uuid4().hex[:6]}"
    script = scripted(ToolCall("charge", {"amount": 900}), ToolCall("restock", {"sku": "A1"}))
    assert run_durable(gated, journal=journal, tools=tools, planner=script).status == "finished"
    compensate_run(gated, journal=journal, tools=tools, actor="ops-bot", reason="order cancelled")
    assert run_of(journal, gated).unwind_state is UnwindState.AWAITING

    page = logged_in(chromium, deployment.console.url, tokens.operator)
    total = int(page.locator("#inbox-total").inner_text())
    assert total >= 2
    page.click("#inbox-link")
    expect(page.locator("h1")).to_have_text("Inbox")
    call = page.locator(f"tr[data-kind=suspended][data-run={waiting}]")
    gate = page.locator(f"tr[data-kind=gated][data-run={gated}]")
    expect(call).to_contain_text("refund")
    expect(gate).to_contain_text("restock")
    # Oldest first: the suspended call was waiting before the gate.
    rows = page.locator("#inbox tbody tr").evaluate_all("rows => rows.map(r => r.dataset.run)")
    assert rows.index(waiting) < rows.index(gated)
    expect(call.locator("time")).to_have_attribute("title", re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$"))
    DOCS.mkdir(exist_ok=True)
    page.screenshot(path=str(DOCS / "console-inbox.png"), full_page=True)

    # A denial is not sent without its confirmation box: the browser holds the form back.
    deny = call.locator("form").filter(has=page.locator("button", has_text="Deny"))
    deny.locator("input[name=reason]").fill("not sure yet")
    deny.locator("button").click()
    expect(page.locator("#next-step")).to_have_count(0)
    assert record_of(journal, waiting, "call-2").status is RecordStatus.SUSPENDED

    approve = call.locator("form").filter(has=page.locator("button", has_text="Approve"))
    approve.locator("input[name=reason]").fill("customer called back")
    approve.locator("button").click()
    expect(page.locator("#next-step")).to_contain_text(
        f"executes when your application resumes run {waiting}"
    )
    expect(page.locator(f"#inbox tr[data-run={waiting}]")).to_have_count(0)
    assert record_of(journal, waiting, "call-2").status is RecordStatus.APPROVED

    approve = page.locator(f"tr[data-kind=gated][data-run={gated}] form").filter(
        has=page.locator("button", has_text="Approve")
    )
    approve.locator("input[name=reason]").fill("stock counted")
    approve.locator("button").click()
    expect(page.locator("#next-step")).to_contain_text("beat sweeper re-drives the unwind")
    expect(page.locator(f"#inbox tr[data-run={gated}]")).to_have_count(0)
    # No decision holds it up any more: its unwind is due, in the stuck lane until the sweeper runs it.
    expect(page.locator(f"#stuck-lane tr[data-run={gated}]")).to_have_attribute("data-why", "unfinished")
    expect(page.locator("#inbox-total")).to_have_text(str(total - 2))
    trail = {(r.action.value, r.actor, r.reason) for r in journal.read_audit(gated)}
    assert ("compensation-approved", "alice", "stock counted") in trail


def long_id(prefix: str) -> str:
    parts = [prefix] + [uuid.uuid4().hex for _ in range(6)]
    return "-".join(parts)[:200]


@pytest.mark.parametrize("width", [390, 1440])
def test_pages_hold_at_a_phone_and_a_desktop_width_with_200_character_ids(
    deployment: Deployment,
    chromium: Any,
    tokens: Tokens,
    journal_and_ledger: tuple[Journal, Ledger],
    width: int,
) -> None:
    run_id = long_id(f"w{width}")
    assert len(run_id) == 200
    place_order(*journal_and_ledger, run_id)
    page = logged_in(chromium, deployment.console.url, tokens.viewer, width=width)

    def holds() -> None:
        scroll = page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= width, f"{page.url}: {scroll} px wide at {width} px"

    def on_screen(selector: str) -> None:
        box = page.locator(selector).first.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (selector, box)

    page.goto(f"{deployment.console.url}/?search={run_id[:40]}")
    expect(page.locator("table.runs tbody tr")).to_have_count(1)
    holds()
    on_screen("table.runs tbody tr td:nth-child(2) .badge")  # the status, on screen
    if width == 390:
        page.screenshot(path=str(DOCS / "console-phone.png"), full_page=True)

    page.goto(f"{deployment.console.url}/runs/{run_id}")
    expect(page.locator("h1")).to_contain_text(run_id)
    holds()
    on_screen("dl.summary .badge")
    on_screen("#unwind-state")
    for key in page.locator("code.key").all():
        style = key.evaluate("k => [getComputedStyle(k).wordBreak, getComputedStyle(k).overflowWrap]")
        assert style == ["normal", "normal"], style  # a key wraps only where it has a break
        html = key.inner_html()
        assert all(before.endswith(":") for before in html.split("<wbr>")[:-1]), html  # after its ":"s


def test_compensate_with_no_worker_on_the_queue_names_the_task_and_refuses_a_second_request(
    deployment: Deployment, chromium: Any, tokens: Tokens, journal_and_ledger: tuple[Journal, Ledger]
) -> None:
    # A console sending to a queue nobody consumes (the deployment's worker reads its own).
    queue = f"nobody-{uuid.uuid4().hex[:8]}"
    console = ConsoleServer(deployment.setup, tokens, deployment.tmp / "console-nobody.log", SAGA_QUEUE=queue)
    try:
        run_id = f"order-idle-{uuid.uuid4().hex[:6]}"
        place_order(*journal_and_ledger, run_id)
        page = logged_in(chromium, console.url, tokens.operator)
        page.goto(f"{console.url}/runs/{run_id}")
        page.click("#dry-run")
        page.fill("#reason", "customer cancelled")
        page.click("#compensate")
        queued = page.locator("#queued")
        expect(queued).to_contain_text(f"no worker consumes queue '{queue}'")
        task = re.search(r"task=([0-9a-f-]{36})", page.url)
        assert task is not None
        expect(queued).to_contain_text(task.group(1))
        page.screenshot(path=str(DOCS / "console-no-worker.png"), full_page=True)

        page.click("#dry-run")
        page.fill("#reason", "clicked again")
        page.click("#compensate")
        expect(page.locator("h1")).to_have_text("Not now")
        expect(page.locator("p.error")).to_contain_text("has not started")
        expect(page.locator("p.error")).to_contain_text(task.group(1))
        assert not run_of(journal_and_ledger[0], run_id).condemned  # nobody took it
    finally:
        console.stop()
