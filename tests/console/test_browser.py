"""The console in a real headless Chromium, against a real worker: what an operator sees and does."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from saga_worker import Journal, ToolCall, run_durable, scripted
from saga_worker.journal.records import UnwindState
from tests.integration.scenarios import place_order
from tests.integration.worker_tools import approval_tools
from tests.ledger import Ledger, order_tools
from tests.reads import run_of

from .conftest import DOCS, Deployment, Tokens

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]
pytest.importorskip("playwright")
from playwright.sync_api import Page, expect  # noqa: E402

WAIT_MS = 60_000
expect.set_options(timeout=WAIT_MS)


def page_for(chromium: Any, deployment: Deployment, token: str) -> Page:
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page: Page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(deployment.console.url + "/")
    expect(page.locator("h1")).to_have_text("Log in")  # nothing shows without a token
    page.fill("#token", token)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Runs")
    return page


def order(journal_and_ledger: tuple[Journal, Ledger], prefix: str) -> str:
    run_id = f"{prefix}-{uuid.uuid4().hex[:6]}"
    place_order(*journal_and_ledger, run_id)
    return run_id


def comp_statuses(page: Page) -> Any:
    return page.locator("#steps tbody tr td.comp-status .badge")


def test_an_operator_goes_from_the_list_to_a_run_plans_it_and_watches_its_steps_turn_compensated(
    deployment: Deployment, chromium: Any, tokens: Tokens, journal_and_ledger: tuple[Journal, Ledger]
) -> None:
    for n in range(4):
        order(journal_and_ledger, f"order-{n}")
    run_id = order(journal_and_ledger, "order-7")
    # The charge's refund takes a moment, so the page has an unwind in progress to follow.
    deployment.setup.control_file(run_id, "slow", "charge", "2")
    page = page_for(chromium, deployment, tokens.operator)

    page.fill("input[name=search]", "order-7")
    page.click("text=Filter")
    expect(page.locator("table.runs tbody tr")).to_have_count(1)
    page.click(f"text={run_id}")
    expect(page.locator("h1")).to_contain_text(run_id)
    expect(page.locator("#steps tbody tr")).to_have_count(3)  # charge, reserve, notify in execution order
    expect(page.locator("#steps tbody tr td:nth-child(3)")).to_have_text(["charge", "reserve", "notify"])

    page.click("#dry-run")
    expect(page.locator("h1")).to_contain_text("Dry run")
    expect(page.locator("#plan tbody tr .badge")).to_have_text(["would-compensate"] * 3)
    assert not run_of(journal_and_ledger[0], run_id).condemned  # a plan writes nothing

    page.fill("#reason", "customer cancelled order 7")
    page.click("#compensate")
    expect(page).to_have_url(re.compile(rf"/runs/{run_id}\?watch=1&task=[0-9a-f-]{{36}}$"))
    # The page names the queued task and that a worker consumes the queue.
    expect(page.locator("#queued")).to_contain_text("1 worker(s) consume queue")
    page.evaluate("window.__notReloaded = true")
    # The steps turn compensated on the page by themselves (polling), without a reload.
    expect(comp_statuses(page)).to_have_text(["compensated"] * 3, timeout=WAIT_MS)
    expect(page.locator("#unwind-state")).to_have_text("complete")
    expect(page.locator("#condemned")).to_contain_text("condemned")
    assert page.evaluate("window.__notReloaded === true")
    expect(page.locator("details.unwind").first.locator(".entry-status")).to_have_text(["compensated"] * 3)
    # Each unwind says when it started and ended, how long it took and how it came out.
    summary = page.locator("details.unwind").first.locator("summary")
    expect(summary.locator(".outcome")).to_have_text("complete")
    expect(summary).to_contain_text("took")
    expect(summary.locator("time")).to_have_count(2)
    DOCS.mkdir(exist_ok=True)
    page.screenshot(path=str(DOCS / "console-run.png"), full_page=True)

    page.goto(deployment.console.url + "/")
    expect(page.locator(f"tr[data-run={run_id}] td:nth-child(3)")).to_have_text("condemned")
    page.screenshot(path=str(DOCS / "console-runs.png"), full_page=True)

    ledger = journal_and_ledger[1]
    undone = {c.key for c in ledger.effects() if c.key.startswith(run_id + ":comp:")}
    assert undone == {f"{run_id}:comp:call-{n}" for n in (1, 2, 3)}


def test_a_viewer_sees_the_plan_but_cannot_compensate(
    deployment: Deployment, chromium: Any, tokens: Tokens, journal_and_ledger: tuple[Journal, Ledger]
) -> None:
    run_id = order(journal_and_ledger, "order-viewed")
    page = page_for(chromium, deployment, tokens.viewer)
    page.goto(f"{deployment.console.url}/runs/{run_id}")
    page.click("#dry-run")
    expect(page.locator("#plan tbody tr .badge")).to_have_text(["would-compensate"] * 3)
    expect(page.locator("#compensate")).to_have_count(0)
    expect(page.get_by_text("You are a viewer")).to_be_visible()

    # Posting the form anyway, with the viewer's own CSRF token (from the run page), is refused.
    page.goto(f"{deployment.console.url}/runs/{run_id}")
    answer = page.evaluate(
        """async (runId) => {
            const csrf = document.querySelector("input[name=csrf]").value;
            const body = new URLSearchParams({csrf: csrf, reason: "just looking"});
            const r = await fetch(`/runs/${runId}/compensate`, {method: "POST", body: body});
            return r.status;
        }""",
        run_id,
    )
    assert answer == 403
    assert not run_of(journal_and_ledger[0], run_id).condemned
    # The dry run runs the tools' code in the console: a POST the cookie alone carries is refused too,
    # on the page and on the API (issue 43).
    statuses = page.evaluate(
        """async (runId) => {
            const page = await fetch(`/runs/${runId}/plan`, {method: "POST"});
            const api = await fetch(`/api/runs/${runId}/plan`, {method: "POST"});
            return [page.status, api.status];
        }""",
        run_id,
    )
    assert statuses == [403, 403]
    # The header's "log out" carries the session's token: it ends the session.
    page.click("button:has-text('log out')")
    expect(page.locator("h1")).to_have_text("Log in")
    page.goto(deployment.console.url + "/")
    expect(page.locator("h1")).to_have_text("Log in")


def test_a_halted_unwind_shows_its_failed_step_and_the_error(
    deployment: Deployment, chromium: Any, tokens: Tokens, journal_and_ledger: tuple[Journal, Ledger]
) -> None:
    run_id = order(journal_and_ledger, "order-refused")
    deployment.setup.control_file(run_id, "fail", "reserve")
    page = page_for(chromium, deployment, tokens.operator)
    page.goto(f"{deployment.console.url}/runs/{run_id}")
    page.click("#dry-run")
    page.fill("#reason", "stock was never shipped")
    page.click("#compensate")
    # notify undone, reserve refused, charge not attempted: the unwind halted at reserve.
    unwind = page.locator("details.unwind").first
    expect(unwind.locator(".entry-status")).to_have_text(["compensated", "failed", "not-attempted"])
    expect(unwind).to_contain_text("RuntimeError: reserve: the provider refused the compensation")
    expect(page.locator("#unwind-state")).to_have_text("incomplete")
    expect(page.locator("#steps tr[data-suffix=call-2] td.comp-status .badge")).to_have_text("failed")
    page.screenshot(path=str(DOCS / "console-halted.png"), full_page=True)
    run = journal_and_ledger[0].get_run(run_id)
    assert run is not None and run.unwind_state is UnwindState.INCOMPLETE


def test_an_operator_approves_a_gated_compensation_on_the_run_page_and_the_trail_names_them(
    deployment: Deployment, chromium: Any, tokens: Tokens, journal_and_ledger: tuple[Journal, Ledger]
) -> None:
    journal, ledger = journal_and_ledger
    run_id = f"order-gated-{uuid.uuid4().hex[:6]}"
    script = scripted(ToolCall("charge", {"amount": 900}), ToolCall("restock", {"sku": "A1"}))
    tools = {**order_tools(ledger), **approval_tools(ledger)}
    assert run_durable(run_id, journal=journal, tools=tools, planner=script).status == "finished"
    page = page_for(chromium, deployment, tokens.operator)
    page.goto(f"{deployment.console.url}/runs/{run_id}")
    page.click("#dry-run")
    expect(page.locator("#plan tr[data-suffix=call-2]")).to_contain_text("needs approval")
    page.fill("#reason", "order 9 cancelled")
    page.click("#compensate")
    unwind = page.locator("details.unwind").first
    expect(unwind.locator(".entry-status")).to_have_text(["awaiting-approval", "not-attempted"])
    expect(page.locator("#unwind-state")).to_have_text("awaiting")
    gate = page.locator("tr[data-approval='compensation:call-2']")
    expect(gate).to_contain_text("restock")
    page.screenshot(path=str(DOCS / "console-approval.png"), full_page=True)

    approve_form = gate.locator("form").filter(has=page.locator("button", has_text="Approve"))
    approve_form.locator("input[name=reason]").fill("stock counted")
    approve_form.locator("button").click()
    expect(page).to_have_url(re.compile(rf"/runs/{run_id}\?watch=1&notice="))
    expect(page.locator("#next-step")).to_contain_text("beat sweeper re-drives the unwind")
    expect(page.locator("tr[data-approval]")).to_have_count(0)
    approved = page.locator("table.audit tr[data-action=compensation-approved]")
    expect(approved).to_contain_text("alice")
    expect(approved).to_contain_text("stock counted")

    # Nobody's beat runs here: the operator resumes the unwind, which now undoes the gated step.
    page.click("#dry-run")
    page.fill("#reason", "resume after approval")
    page.click("#compensate")
    expect(page.locator("#unwind-state")).to_have_text("complete")
    expect(page.locator("details.unwind").first.locator(".entry-status")).to_have_text(["compensated"] * 2)
    expect(page.locator("table.audit tr[data-action=condemned]")).to_contain_text("order 9 cancelled")
    expect(page.locator("table.audit tr[data-action=unwound]")).to_have_count(2)
    assert ledger.effect_counts("compensate:restock")[f"{run_id}:comp:call-2"] == 1


def test_a_suspended_call_is_denied_by_an_operator_and_a_viewer_sees_no_buttons(
    deployment: Deployment, chromium: Any, tokens: Tokens, journal_and_ledger: tuple[Journal, Ledger]
) -> None:
    journal, ledger = journal_and_ledger
    run_id = f"refund-{uuid.uuid4().hex[:6]}"
    script = scripted(ToolCall("charge", {"amount": 10}), ToolCall("refund", {"amount": 500}))
    tools = {**order_tools(ledger), **approval_tools(ledger)}
    assert run_durable(run_id, journal=journal, tools=tools, planner=script).status == "suspended"

    viewer = page_for(chromium, deployment, tokens.viewer)
    viewer.goto(f"{deployment.console.url}/runs/{run_id}")
    call = viewer.locator("tr[data-approval='call:call-2']")
    expect(call).to_contain_text("suspended")
    expect(call.locator("button")).to_have_count(0)
    expect(call).to_contain_text("an operator can approve or deny")

    page = page_for(chromium, deployment, tokens.operator)
    page.goto(f"{deployment.console.url}/runs/{run_id}")
    deny_form = page.locator("tr[data-approval='call:call-2'] form").filter(
        has=page.locator("button", has_text="Deny")
    )
    deny_form.locator("input[name=reason]").fill("looks like fraud")
    deny_form.locator("input[name=confirm]").check()  # a denial is confirmed, like a compensation
    deny_form.locator("button").click()
    expect(page.locator("tr[data-approval]")).to_have_count(0)
    expect(page.locator("#steps tr[data-suffix=call-2]")).to_contain_text("denied")
    denied = page.locator("table.audit tr[data-action=denied]")
    expect(denied).to_contain_text("alice")
    expect(denied).to_contain_text("looks like fraud")
    record = journal.get_record(run_id, "call-2")
    assert record is not None and record.status.value == "denied"
    assert ledger.effect_counts("execute:refund")[f"{run_id}:call-2"] == 0
