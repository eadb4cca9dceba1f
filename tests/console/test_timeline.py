"""A run as one story (issue 49): its calls, their undoing (here in process, as `compensate
--local` does), the unwind and the audit trail on one timeline, in order; and a gated compensation
in the inbox shows the call's input and output, so a person approves seeing the amount."""

from __future__ import annotations

import re
import uuid
from typing import Any

from starlette.testclient import TestClient

from saga_worker import ToolCall, compensate_run, run_durable, scripted
from tests.console.clients import bearer, console_journal
from tests.ledger import MemoryLedger, order_script, order_tools

from .conftest import Tokens


def test_the_run_page_tells_calls_undos_and_the_trail_as_one_timeline_in_order(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    journal = console_journal(app)
    run_id = f"story-{uuid.uuid4().hex[:8]}"
    run_durable(run_id, journal=journal, tools=order_tools(ledger), planner=scripted(*order_script()))
    compensate_run(run_id, journal=journal, tools=order_tools(ledger), actor="ana", reason="fraud", via="cli")
    page = app.get(f"/runs/{run_id}", headers=bearer(tokens.viewer)).text
    timeline = page[page.index('id="timeline"') : page.index("</ol>", page.index('id="timeline"'))]
    kinds = re.findall(r'data-kind="(\w+)"', timeline)
    calls = len(order_script())
    assert kinds[0] == "run" and kinds.count("call") == calls and kinds.count("compensation") >= 2
    assert kinds.index("audit") > max(i for i, k in enumerate(kinds) if k == "call"), (
        "the trail comes after the calls"
    )
    assert "unwound in process" in timeline and "condemned" in timeline and "“fraud”" in timeline
    assert "in process, attempt 1" in timeline
    times = [float(t) for t in re.findall(r'data-at="([0-9.]+)"', timeline)]
    assert len(times) == len(kinds) and times == sorted(times)
    story = app.get(f"/api/runs/{run_id}", headers=bearer(tokens.viewer)).json()["timeline"]
    assert [e["kind"] for e in story] == kinds and [e["at"] for e in story] == times


def test_a_gated_compensation_in_the_inbox_shows_the_calls_input_and_output(
    app: TestClient, tokens: Tokens, tools: dict[str, Any]
) -> None:
    journal = console_journal(app)
    run_id = f"restock-{uuid.uuid4().hex[:8]}"
    script = scripted(ToolCall("restock", {"sku": "A1", "amount_eur": 4200}))
    run_durable(run_id, journal=journal, tools=tools, planner=script)
    compensate_run(run_id, journal=journal, tools=tools)  # halts at restock's gate
    page = app.get("/inbox", headers=bearer(tokens.viewer)).text
    row = page[page.index(f'data-run="{run_id}"') :]
    row = row[: row.index("</tr>")]
    assert "amount_eur" in row and "4200" in row, "the input: what is undone"
    assert 'class="json output"' in row and "restock-call-1" in row, "the output: what the call gave"
