"""A person's inbox (issue 23): everything that waits for a person across runs, in the console's
pages, its API, its /metrics and `saga-worker inbox`; the decisions taken from it; the feedback of an
unwind nobody consumes. In process on a real SQLite journal (the browser tests use a real worker)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from saga_worker import Journal, Tool, ToolCall, compensate_run, run_durable, scripted
from saga_worker.console.app import create_app
from saga_worker.executor.context import WorkerContext
from saga_worker.journal.records import NewRecord, RecordStatus, UnwindState
from saga_worker.settings import SagaSettings
from tests.console.clients import BASE, Sent, bearer, console_journal, csrf_of
from tests.ledger import order_script
from tests.reads import record_of, run_of

from .conftest import Tokens


def journal_of(app: TestClient) -> Journal:
    return console_journal(app)


def suspended(app: TestClient, tools: dict[str, Any], prefix: str = "refund") -> str:
    run_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    script = scripted(ToolCall("charge", {"amount": 10}), ToolCall("refund", {"amount": 500}))
    assert run_durable(run_id, journal=journal_of(app), tools=tools, planner=script).status == "suspended"
    return run_id


def gated(app: TestClient, tools: dict[str, Any]) -> str:
    run_id = f"gated-{uuid.uuid4().hex[:8]}"
    script = scripted(ToolCall("charge", {"amount": 900}), ToolCall("restock", {"sku": "A1"}))
    assert run_durable(run_id, journal=journal_of(app), tools=tools, planner=script).status == "finished"
    compensate_run(run_id, journal=journal_of(app), tools=tools, actor="ops-bot", reason="cancelled")
    assert run_of(journal_of(app), run_id).unwind_state is UnwindState.AWAITING
    return run_id


def flagged(app: TestClient, tools: dict[str, Any]) -> str:
    run_id = f"stuck-{uuid.uuid4().hex[:8]}"
    journal = journal_of(app)
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order_script()))
    journal.condemn(run_id)
    journal.set_unwind_state(run_id, UnwindState.ATTENTION, note="gave up after 8 re-drives")
    return run_id


def uncertain(app: TestClient) -> str:
    """A call whose execute began and whose process died: no outcome, its lease run out."""
    run_id = f"crashed-{uuid.uuid4().hex[:8]}"
    journal = journal_of(app)
    journal.start_run(run_id, "ship it")
    new = NewRecord("call-1", 0, "call-1", "charge", "call", {"amount": 5}, run_id)
    journal.claim_record(run_id, new, gated=True, owner="dead-worker", ttl=0.001)
    return run_id


def test_the_inbox_lists_every_kind_across_runs_oldest_first_with_counts_in_the_header_and_the_metric(
    app: TestClient, tools: dict[str, Any], tokens: Tokens
) -> None:
    first = suspended(app, tools)
    gate = gated(app, tools)
    stuck = flagged(app, tools)
    crashed = uncertain(app)
    journal_of(app).condemn(suspended(app, tools, "dropped"))  # condemned: its call waits for nobody
    body = app.get("/api/inbox", headers=bearer(tokens.viewer)).json()
    assert [(i["kind"], i["run_id"]) for i in body["items"]] == [
        ("suspended", first),
        ("gated", gate),
        ("attention", stuck),
        ("uncertain", crashed),
    ]
    assert [i["since"] for i in body["items"]] == sorted(i["since"] for i in body["items"])
    assert body["counts"] == {"suspended": 1, "gated": 1, "attention": 1, "uncertain": 1}
    by_kind = {i["kind"]: i for i in body["items"]}
    assert by_kind["suspended"]["target"] == "call-2" and by_kind["suspended"]["tool_name"] == "refund"
    assert [a["name"] for a in by_kind["suspended"]["actions"]] == ["approve", "deny"]
    assert by_kind["gated"]["target"] == "call-2" and by_kind["gated"]["tool_name"] == "restock"
    assert [a["name"] for a in by_kind["gated"]["actions"]] == ["approve-compensation", "deny-compensation"]
    assert [a["name"] for a in by_kind["attention"]["actions"]] == ["redrive"]
    assert by_kind["attention"]["note"] == "gave up after 8 re-drives"

    app.post("/login", data={"token": tokens.operator})
    page = app.get("/inbox")
    assert page.status_code == 200
    rows = re.findall(r'<tr data-kind="([a-z]+)" data-run="([^"]+)"', page.text)
    assert rows == [("suspended", first), ("gated", gate), ("attention", stuck), ("uncertain", crashed)]
    header = app.get("/").text
    assert re.search(r'id="inbox-total">4<', header)
    for kind in ("suspended", "gated", "attention", "uncertain"):
        assert f'data-kind="{kind}">1 {kind}<' in header

    metrics = app.get("/metrics", headers=bearer(tokens.viewer)).text
    for kind in ("suspended", "gated", "attention", "uncertain"):
        assert f'saga_runs_needing_attention{{kind="{kind}"}} 1.0' in metrics


def test_a_run_with_a_suspended_call_reads_suspended_and_the_filters_find_it_and_awaiting_runs(
    app: TestClient, tools: dict[str, Any], tokens: Tokens
) -> None:
    waiting, gate = suspended(app, tools), gated(app, tools)
    listing = app.get("/api/runs", headers=bearer(tokens.viewer)).json()["runs"]
    status = {r["run_id"]: r["status"] for r in listing}
    assert status[waiting] == "suspended" and status[gate] == "finished"
    assert (
        app.get(f"/api/runs/{waiting}", headers=bearer(tokens.viewer)).json()["run"]["status"] == "suspended"
    )
    found = app.get("/api/runs", params={"status": "suspended"}, headers=bearer(tokens.viewer)).json()["runs"]
    assert [r["run_id"] for r in found] == [waiting]
    page = app.get("/", params={"status": "suspended"}, headers=bearer(tokens.viewer))
    assert page.status_code == 200 and f'data-run="{waiting}"' in page.text and gate not in page.text
    awaiting = app.get("/", params={"unwind": "awaiting"}, headers=bearer(tokens.viewer))
    assert (
        awaiting.status_code == 200 and f'data-run="{gate}"' in awaiting.text and waiting not in awaiting.text
    )
    assert '<option value="awaiting"' in awaiting.text


def test_a_decision_from_the_inbox_needs_a_reason_a_denial_its_confirmation_and_the_page_says_what_next(
    app: TestClient, tools: dict[str, Any], tokens: Tokens
) -> None:
    call_run, deny_run, gate = suspended(app, tools), suspended(app, tools), gated(app, tools)
    app.post("/login", data={"token": tokens.operator})
    csrf = csrf_of(app.get("/inbox").text)
    approve = {"csrf": csrf, "decision": "approve", "target": "call-2", "back": "inbox"}
    assert app.post(f"/runs/{call_run}/decide", data=approve).status_code == 400  # no reason
    answer = app.post(f"/runs/{call_run}/decide", data={**approve, "reason": "customer called back"})
    assert answer.status_code == 200 and answer.url.path == "/inbox"
    assert f"executes when your application resumes run {call_run}" in answer.text
    assert record_of(journal_of(app), call_run, "call-2").status is RecordStatus.APPROVED

    deny = {"csrf": csrf, "decision": "deny", "target": "call-2", "back": "inbox", "reason": "fraud"}
    assert app.post(f"/runs/{deny_run}/decide", data=deny).status_code == 400  # not confirmed
    assert record_of(journal_of(app), deny_run, "call-2").status is RecordStatus.SUSPENDED
    answer = app.post(f"/runs/{deny_run}/decide", data={**deny, "confirm": "yes"})
    assert answer.status_code == 200 and "its planner gets the call&#39;s error" in answer.text

    allow = {"csrf": csrf, "decision": "approve-compensation", "target": "call-2", "back": "inbox"}
    answer = app.post(f"/runs/{gate}/decide", data={**allow, "reason": "stock counted"})
    assert answer.status_code == 200 and "beat sweeper re-drives the unwind" in answer.text
    assert app.get("/api/inbox", headers=bearer(tokens.viewer)).json()["items"] == []
    assert "Nothing waits for a person." in app.get("/inbox").text
    for page in (app.get("/inbox").text, app.get("/").text):
        assert "{{" not in page  # every template rendered


def test_a_second_unwind_is_refused_while_the_first_is_queued_and_the_page_says_no_worker_consumes_it(
    app: TestClient, tools: dict[str, Any], tokens: Tokens, sent: Sent
) -> None:
    run_id = f"order-{uuid.uuid4().hex[:8]}"
    run_durable(run_id, journal=journal_of(app), tools=tools, planner=scripted(*order_script()))
    app.post("/login", data={"token": tokens.operator})
    csrf = csrf_of(app.get(f"/runs/{run_id}").text)
    answer = app.post(f"/runs/{run_id}/compensate", data={"csrf": csrf, "reason": "customer cancelled"})
    task = sent.task_ids[0]
    assert answer.status_code == 200 and f"task={task}" in str(answer.url)
    assert "Unwind queued as task" in answer.text and task.split("-")[0] in answer.text
    assert "no worker consumes" in answer.text and "queue &#39;saga&#39;" in answer.text
    again = app.post(f"/runs/{run_id}/compensate", data={"csrf": csrf, "reason": "clicked twice"})
    assert again.status_code == 409 and task in again.text and "has not started" in again.text
    api = app.post(
        f"/api/runs/{run_id}/compensate", json={"reason": "again"}, headers=bearer(tokens.operator)
    )
    assert api.status_code == 409
    assert sent.calls == [(run_id, False)]  # one unwind queued, not three

    # Once the unwind has started (the worker recorded it), asking again is allowed.
    compensate_run(run_id, journal=journal_of(app), tools=tools, actor="worker", reason="customer cancelled")
    plan = app.post(f"/runs/{run_id}/plan", data={"csrf": csrf})
    assert 'id="compensate"' not in plan.text and "nothing left to condemn" in plan.text  # already unwound


def test_saga_worker_inbox_prints_what_waits_for_a_person_and_json_for_programs(
    app: TestClient, tools: dict[str, Any], settings: SagaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from saga_worker.cli import main
    from saga_worker.settings import get_settings

    waiting, stuck = suspended(app, tools), flagged(app, tools)
    monkeypatch.setenv("SAGA_JOURNAL_URL", str(settings.journal_url))
    monkeypatch.setenv("SAGA_HOME", str(settings.home))
    get_settings.cache_clear()
    try:
        table = CliRunner().invoke(main, ["inbox"])
        as_json = CliRunner().invoke(main, ["inbox", "--json"])
    finally:
        get_settings.cache_clear()
    assert table.exit_code == 0, table.output
    assert waiting in table.output and stuck in table.output and "suspended" in table.output
    assert "saga-worker approve" in table.output and "saga-worker redrive" in table.output
    import json

    body = json.loads(as_json.output)
    assert [(i["kind"], i["run_id"]) for i in body["items"]] == [("suspended", waiting), ("attention", stuck)]


def test_an_inbox_with_more_waiting_than_its_limit_says_so_on_the_page_the_api_and_the_cli(
    app: TestClient,
    tokens: Tokens,
    tools: dict[str, Any],
    settings: SagaSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from saga_worker.cli import main
    from saga_worker.settings import get_settings

    runs = [suspended(app, tools) for _ in range(3)]
    capped = app.get("/api/inbox?limit=2", headers=bearer(tokens.viewer)).json()
    assert [i["run_id"] for i in capped["items"]] == runs[:2]  # the oldest first
    assert (capped["limit"], capped["more"]) == (2, True)
    whole = app.get("/api/inbox?limit=3", headers=bearer(tokens.viewer)).json()
    assert (len(whole["items"]), whole["more"]) == (3, False)
    assert app.get("/api/inbox?limit=0", headers=bearer(tokens.viewer)).status_code == 400
    assert app.get("/api/inbox?limit=lots", headers=bearer(tokens.viewer)).status_code == 400
    page = app.get("/inbox?limit=2", headers=bearer(tokens.viewer)).text
    assert 'id="inbox-more"' in page and "only the oldest 2 of each kind" in page
    assert 'href="/inbox?limit=8"' in page and runs[2] not in page
    assert re.search(r'id="inbox-total">3<', page)  # the header still counts all three
    assert 'id="inbox-more"' not in app.get("/inbox", headers=bearer(tokens.viewer)).text
    monkeypatch.setenv("SAGA_JOURNAL_URL", str(settings.journal_url))
    monkeypatch.setenv("SAGA_HOME", str(settings.home))
    get_settings.cache_clear()
    try:
        table = CliRunner().invoke(main, ["inbox", "--limit", "2"])
        refused = CliRunner().invoke(main, ["inbox", "--limit", "0"])
    finally:
        get_settings.cache_clear()
    assert table.exit_code == 0, table.output
    assert "more wait than are listed: only the oldest 2 of each kind" in table.output
    assert refused.exit_code == 2 and "--limit" in refused.output


def test_the_consoles_metrics_say_where_the_workers_figures_are_instead_of_reading_zero(
    app: TestClient, tokens: Tokens
) -> None:
    text = app.get("/metrics", headers=bearer(tokens.viewer)).text
    assert "are the workers'" in text and "SAGA_METRICS_PORT" in text
    assert "saga_unwinds_started_total" not in text  # not a 0 that reads as "nothing happened"
    assert 'saga_runs_needing_attention{kind="attention"} 0.0' in text


@pytest.fixture
def any_app(
    journal_url: str, tmp_path: Path, tokens: Tokens, tools: dict[str, Any], sent: Sent
) -> Iterator[TestClient]:
    """The console on each journal (memory: its own, which the test fills through the console)."""
    settings = SagaSettings(
        home=tmp_path,
        journal_url=journal_url,
        console_tokens=tokens.spec,
        console_secret="s" * 40,
        claim_ttl=2.0,
    )
    context = WorkerContext(settings, tools=lambda: tools)
    console = create_app(settings, context=context, enqueue=sent, workers=lambda: [])
    with TestClient(console, base_url=BASE) as client:
        yield client


def test_hundreds_of_condemned_runs_whose_calls_were_suspended_do_not_hide_the_calls_that_wait(
    any_app: TestClient,
    journal_url: str,
    tools: dict[str, Any],
    tokens: Tokens,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from saga_worker.cli import main
    from saga_worker.operating import inbox as inbox_view
    from saga_worker.settings import get_settings

    journal = journal_of(any_app)
    for n in range(600):  # older than the limit (500) and all condemned: their calls wait for nobody
        run_id = f"dropped-{n:03d}"
        journal.start_run(run_id, "")
        new = NewRecord(
            "call-1", 0, "call-1", "refund", "call", {"amount": 1}, run_id, RecordStatus.SUSPENDED
        )
        journal.claim_record(run_id, new, gated=True, owner="w", ttl=30.0)
        journal.condemn(run_id)

    def cli(*args: str) -> str | None:
        if journal_url == "memory://":  # another process's memory: nothing to read
            return None
        monkeypatch.setenv("SAGA_JOURNAL_URL", journal_url)
        monkeypatch.setenv("SAGA_HOME", str(tmp_path))
        get_settings.cache_clear()
        try:
            done = CliRunner().invoke(main, ["inbox", *args])
        finally:
            get_settings.cache_clear()
        assert done.exit_code == 0, done.output
        return done.output

    def api() -> dict[str, Any]:
        body: dict[str, Any] = any_app.get("/api/inbox", headers=bearer(tokens.viewer)).json()
        return body

    nothing = api()
    assert (nothing["total"], nothing["more"]) == (0, False)  # nothing waits, and it says so
    assert inbox_view.inbox(journal)["more"] is False
    text = cli()
    assert text is None or (text.startswith("waiting for a person: 0 ") and "more wait" not in text)

    waiting = [suspended(any_app, tools) for _ in range(5)]
    any_app.post("/login", data={"token": tokens.operator})
    body, found = api(), inbox_view.inbox(journal)
    page = any_app.get("/inbox").text
    as_json = cli("--json")

    for seen in (body, found, None if as_json is None else json.loads(as_json)):
        if seen is None:
            continue
        assert [i["run_id"] for i in seen["items"]] == waiting
        assert seen["counts"]["suspended"] == 5 and seen["total"] == 5 and seen["more"] is False
    assert re.search(r'id="inbox-total">5<', page) and 'id="inbox-more"' not in page
    assert re.findall(r'<tr data-kind="suspended" data-run="([^"]+)"', page) == waiting
    metrics = any_app.get("/metrics", headers=bearer(tokens.viewer)).text
    assert 'saga_runs_needing_attention{kind="suspended"} 5.0' in metrics


def halted(app: TestClient) -> str:
    """An unwind halted at a failed refund: its compensate hook raised (issue 48's stuck lane)."""
    run_id = f"halted-{uuid.uuid4().hex[:8]}"
    journal = journal_of(app)

    def refused(input: Any, output: Any, opts: Any) -> None:
        raise RuntimeError("the provider refused the refund")

    tools = {"charge": Tool(lambda input, opts: {"charge_id": "ch_1"}, refused)}
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(ToolCall("charge", {"amount": 10})))
    report = compensate_run(run_id, journal=journal, tools=tools)
    assert report.halt is not None and report.halt.value == "failed"
    return run_id


def test_a_halted_unwind_is_in_the_stuck_lane_of_the_page_the_api_the_cli_and_the_metric_and_redrives_now(
    app: TestClient, tokens: Tokens, settings: SagaSettings, monkeypatch: pytest.MonkeyPatch, sent: Sent
) -> None:
    from saga_worker.cli import main
    from saga_worker.settings import get_settings

    run_id, waiting = halted(app), suspended_run_for_stuck_lane(app)
    body = app.get("/api/inbox", headers=bearer(tokens.viewer)).json()
    assert [(i["kind"], i["run_id"]) for i in body["items"]] == [("suspended", waiting)]  # not mixed in
    [item] = body["stuck"]["items"]
    assert (item["run_id"], item["why"], item["suffix"], item["tool_name"], item["attempts"]) == (
        run_id, "failed", "call-1", "charge", 1,
    )  # fmt: skip
    assert "the provider refused the refund" in item["error"] and item["next_sweep_iso"].endswith("Z")

    app.post("/login", data={"token": tokens.operator})
    page = app.get("/inbox").text
    assert re.findall(r'<tr data-why="([a-z]+)" data-run="([^"]+)"', page) == [("failed", run_id)]
    assert 'class="badge stuck"' in page and "the provider refused the refund" in page
    assert re.search(r'id="stuck-total"[^>]*>1 stuck<', app.get("/").text)
    metrics = app.get("/metrics", headers=bearer(tokens.viewer)).text
    assert "saga_unwinds_stuck 1.0" in metrics

    monkeypatch.setenv("SAGA_JOURNAL_URL", str(settings.journal_url))
    monkeypatch.setenv("SAGA_HOME", str(settings.home))
    get_settings.cache_clear()
    try:
        table = CliRunner().invoke(main, ["inbox"], env={"COLUMNS": "60"})
        as_json = CliRunner().invoke(main, ["inbox", "--json"])
    finally:
        get_settings.cache_clear()
    assert table.exit_code == 0, table.output
    assert "stuck: 1" in table.output and f"saga-worker redrive {run_id}" in table.output
    [line] = [x for x in table.output.splitlines() if run_id in x and "redrive" not in x]
    assert "failed" in line and "call-1 charge" in line  # one record a line, never wrapped mid-id
    assert "failed after 1 attempt: RuntimeError: the provider refused the refund" in table.output
    assert json.loads(as_json.output)["stuck"]["items"][0]["run_id"] == run_id

    csrf = csrf_of(page)
    answer = app.post(f"/runs/{run_id}/redrive", data={"csrf": csrf})
    assert answer.status_code == 200 and sent.calls == [
        (run_id, False)
    ]  # re-driven now, not at the next sweep


def suspended_run_for_stuck_lane(app: TestClient) -> str:
    run_id = f"refund-{uuid.uuid4().hex[:8]}"
    journal = journal_of(app)
    journal.start_run(run_id, "")
    new = NewRecord("call-1", 0, "call-1", "refund", "call", {"amount": 1}, run_id, RecordStatus.SUSPENDED)
    journal.claim_record(run_id, new, gated=True, owner="w", ttl=30.0)
    return run_id


def test_a_queued_compensate_stays_on_the_run_page_after_a_reload_until_a_worker_takes_it(
    app: TestClient, tools: dict[str, Any], tokens: Tokens
) -> None:
    from saga_worker import executor as ex

    run_id = f"order-{uuid.uuid4().hex[:8]}"
    run_durable(run_id, journal=journal_of(app), tools=tools, planner=scripted(*order_script()))
    app.post("/login", data={"token": tokens.operator})
    csrf = csrf_of(app.get(f"/runs/{run_id}").text)
    app.post(f"/runs/{run_id}/compensate", data={"csrf": csrf, "reason": "customer cancelled"})
    reloaded = app.get(f"/runs/{run_id}").text  # no ?task= in the address any more
    assert 'id="queued"' in reloaded and "not started" in reloaded
    task = re.search(r"queued as task <code[^>]*>([^<]+)</code>", reloaded)
    assert task is not None
    ex.start_unwind(journal_of(app), run_id, task.group(1).replace("<wbr>", ""), dry_run=False, claim_ttl=2.0)
    assert 'id="queued"' not in app.get(f"/runs/{run_id}").text  # a worker took it


def test_a_run_whose_process_died_mid_call_reads_interrupted_not_running_in_the_listing_api_and_cli(
    app: TestClient, tokens: Tokens, settings: SagaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from saga_worker.cli import main
    from saga_worker.settings import get_settings

    crashed = uncertain(app)  # its execute began, its process died: the lease ran out, no outcome
    body = app.get("/api/runs", headers=bearer(tokens.viewer)).json()
    [run] = [r for r in body["runs"] if r["run_id"] == crashed]
    assert (run["status"], run["journal_status"]) == ("interrupted", "running")
    app.post("/login", data={"token": tokens.viewer})
    assert re.search(r'class="badge stuck">interrupted<', app.get("/").text)
    monkeypatch.setenv("SAGA_JOURNAL_URL", str(settings.journal_url))
    monkeypatch.setenv("SAGA_HOME", str(settings.home))
    get_settings.cache_clear()
    try:
        listed = CliRunner().invoke(main, ["runs"])
        reported = CliRunner().invoke(main, ["report", crashed])
    finally:
        get_settings.cache_clear()
    assert f"{crashed}\tinterrupted\t" in listed.output
    assert f"{crashed}: interrupted," in reported.output
