"""What an operator reads (issue 23): times with their start, end and duration (relative on the
page, exact on hover, ISO 8601 and epoch in the API), values whole (expanded and downloaded), and
the search by any part of a run id. In process on a real SQLite journal."""

from __future__ import annotations

import json
import re
import uuid

from starlette.testclient import TestClient

from saga_worker import ToolCall, compensate_run, run_durable, scripted
from tests.console.clients import bearer, console_journal
from tests.ledger import MemoryLedger, order_script, order_tools

from .conftest import Tokens

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def placed(app: TestClient, ledger: MemoryLedger, run_id: str, *calls: ToolCall, prompt: str = "") -> str:
    journal = console_journal(app)
    script = scripted(*(calls or order_script()))
    run_durable(run_id, journal=journal, tools=order_tools(ledger), planner=script, prompt=prompt)
    return run_id


def test_each_call_and_compensation_has_its_start_end_and_duration_relative_on_the_page_exact_on_hover(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    run_id = placed(app, ledger, f"order-{uuid.uuid4().hex[:8]}")
    compensate_run(run_id, journal=console_journal(app), tools=order_tools(ledger))
    body = app.get(f"/api/runs/{run_id}", headers=bearer(tokens.viewer)).json()
    for step in body["steps"]:
        assert isinstance(step["started_at"], float) and ISO.match(step["started_at_iso"])
        assert ISO.match(step["ended_at_iso"]) and step["duration_s"] >= 0
        claim = step["compensation"]
        assert ISO.match(claim["started_at_iso"]) and ISO.match(claim["finished_at_iso"])
        assert claim["duration_s"] >= 0
    assert ISO.match(body["run"]["created_at_iso"]) and ISO.match(body["run"]["condemned_at_iso"])
    assert all(ISO.match(a["at_iso"]) for a in body["audit"])

    page = app.get(f"/runs/{run_id}", headers=bearer(tokens.viewer)).text
    times = re.findall(r'<time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>', page)
    assert len(times) >= 3 + 3 + 2  # each call, each compensation, the trail
    for datetime, exact, shown in times:
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", datetime)
        assert re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$", exact)
        assert re.match(r"^\d+ (s|min|h|d)( \d+ min)? ago$", shown), shown
    assert page.count("took ") >= 6  # a duration for each call and each compensation


def test_a_long_value_is_viewable_whole_on_the_page_and_downloadable_as_json_with_secrets_hidden(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    lines = [f"line {n}: " + "x" * 40 for n in range(30)]
    charge = ToolCall("charge", {"amount": 10, "lines": lines, "api_token": "tok-secret-77"})
    prompt = "Refund the order of " + "a very long story " * 30 + "THE-END"
    run_id = placed(app, ledger, f"order-{uuid.uuid4().hex[:8]}", charge, prompt=prompt)
    page = app.get(f"/runs/{run_id}", headers=bearer(tokens.viewer)).text
    assert "line 29" not in page.split('<details class="whole">')[0]  # the preview is cut …
    whole = re.search(r'<details class="whole"><summary>whole</summary><pre>(.*?)</pre>', page, re.S)
    assert whole is not None and "line 29: " in whole.group(1)  # … and the whole value expands
    assert f'href="/runs/{run_id}/calls/call-1.json"' in page and f'href="/runs/{run_id}/run.json"' in page

    download = app.get(f"/runs/{run_id}/calls/call-1.json", headers=bearer(tokens.viewer))
    assert download.status_code == 200 and download.headers["content-type"] == "application/json"
    assert "attachment" in download.headers["content-disposition"]
    values = json.loads(download.text)
    assert values["input"]["lines"] == lines and values["output"]["input"]["lines"] == lines
    assert values["input"]["api_token"] == "***" and "tok-secret-77" not in download.text
    api = app.get(f"/api/runs/{run_id}/calls/call-1", headers=bearer(tokens.viewer)).json()
    assert api == values

    run = json.loads(app.get(f"/runs/{run_id}/run.json", headers=bearer(tokens.viewer)).text)
    assert run["prompt"] == prompt and run["prompt"].endswith("THE-END")
    assert len(run["decisions"]) >= 1 and "tok-secret-77" not in json.dumps(run)
    assert app.get(f"/api/runs/{run_id}/values", headers=bearer(tokens.viewer)).json() == run
    assert app.get(f"/runs/{run_id}/calls/call-9.json", headers=bearer(tokens.viewer)).status_code == 404
    assert app.get(f"/runs/{run_id}/calls/..%2Fx.json", headers=bearer(tokens.viewer)).status_code in (
        400,
        404,
    )


def test_the_search_finds_any_part_of_the_id_in_any_case_and_a_space_is_not_a_400(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    tag = uuid.uuid4().hex[:6]
    eu = placed(app, ledger, f"Order-7-EU-{tag}")
    us = placed(app, ledger, f"order-17-us-{tag}")
    refund = placed(app, ledger, f"refund-7-{tag}")

    def found(search: str) -> set[str]:
        answer = app.get("/api/runs", params={"search": search}, headers=bearer(tokens.viewer))
        assert answer.status_code == 200, answer.text
        return {r["run_id"] for r in answer.json()["runs"]}

    assert found(f"eu-{tag}") == {eu}  # a middle part, another case
    assert found(f"ORDER {tag}") == {eu, us}  # words, in order
    assert found(f"7 {tag}") == {eu, us, refund}
    assert found(f"  {tag}  ") == {eu, us, refund}
    assert found("no such thing: here") == set()
    page = app.get("/", params={"search": f"order 7 {tag}"}, headers=bearer(tokens.viewer))
    assert page.status_code == 200 and f'data-run="{eu}"' in page.text and refund not in page.text
