"""The console's decisions (docs/reference/approvals.md) over HTTP: approve or deny a suspended call or a gated
compensation (operator only, CSRF from a browser), and the audit trail the run answers with. In
process (Starlette's test client) on a real SQLite journal; unwinds here run in-process, as the
library runs them (the browser tests send them to a real worker)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from saga_worker import Journal, ToolCall, compensate_run, run_durable, scripted
from saga_worker.journal.records import RecordStatus, RunStatus
from tests.console.clients import Sent, bearer, console_journal

from .conftest import Tokens


@pytest.fixture(autouse=True)
def nothing_enqueued(sent: Sent) -> Iterator[None]:
    """A decision enqueues nothing: every test here ends with no unwind handed to the workers."""
    yield
    assert sent.calls == [], "a decision enqueues nothing"


def journal_of(app: TestClient) -> Journal:
    return console_journal(app)


def suspended(app: TestClient, tools: dict[str, Any]) -> str:
    run_id = f"refund-{uuid.uuid4().hex[:8]}"
    script = scripted(ToolCall("charge", {"amount": 10}), ToolCall("refund", {"amount": 500}))
    assert run_durable(run_id, journal=journal_of(app), tools=tools, planner=script).status == "suspended"
    return run_id


def halted_at_gate(app: TestClient, tools: dict[str, Any]) -> str:
    run_id = f"order-{uuid.uuid4().hex[:8]}"
    script = scripted(ToolCall("charge", {"amount": 900}), ToolCall("restock", {"sku": "A1"}))
    assert run_durable(run_id, journal=journal_of(app), tools=tools, planner=script).status == "finished"
    report = compensate_run(run_id, journal=journal_of(app), tools=tools, actor="ops-bot", reason="cancelled")
    assert [e.status.value for e in report.entries] == ["awaiting-approval", "not-attempted"]
    return run_id


def decide(app: TestClient, token: str, run_id: str, **body: str) -> Any:
    return app.post(f"/api/runs/{run_id}/decide", json=body, headers=bearer(token))


def test_a_suspended_call_is_listed_and_an_operator_approves_it_as_themselves(
    app: TestClient, tokens: Tokens, tools: dict[str, Any]
) -> None:
    run_id = suspended(app, tools)
    view = app.get(f"/api/runs/{run_id}", headers=bearer(tokens.viewer)).json()
    assert [(a["kind"], a["target"]) for a in view["approvals"]] == [("call", "call-2")]
    assert view["audit"] == []
    assert decide(app, tokens.viewer, run_id, decision="approve", target="call-2").status_code == 403
    answer = decide(app, tokens.operator, run_id, decision="approve", target="call-2", reason="called back")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "run_id": run_id,
        "decision": "approve",
        "target": "call-2",
        "state": "approved",
        "actor": "alice",
    }
    view = app.get(f"/api/runs/{run_id}", headers=bearer(tokens.viewer)).json()
    assert view["approvals"] == []
    assert [(a["action"], a["actor"], a["via"], a["target"], a["reason"]) for a in view["audit"]] == [
        ("approved", "alice", "console", "call-2", "called back")
    ]


def test_a_gate_awaiting_approval_is_listed_and_approving_it_then_denying_it_is_refused_with_409(
    app: TestClient, tokens: Tokens, tools: dict[str, Any]
) -> None:
    run_id = halted_at_gate(app, tools)
    view = app.get(f"/api/runs/{run_id}", headers=bearer(tokens.operator)).json()
    assert [(a["kind"], a["target"]) for a in view["approvals"]] == [("compensation", "call-2")]
    assert (
        decide(app, tokens.operator, run_id, decision="approve-compensation", target="call-2").status_code
        == 400
    )
    answer = decide(
        app, tokens.operator, run_id, decision="approve-compensation", target="call-2", reason="stock counted"
    )
    assert answer.status_code == 200 and answer.json()["state"] == "approved"
    again = decide(app, tokens.operator, run_id, decision="deny-compensation", target="call-2", reason="no")
    assert again.status_code == 409 and "already approved by alice" in again.json()["error"]
    view = app.get(f"/api/runs/{run_id}", headers=bearer(tokens.operator)).json()
    assert view["approvals"] == []
    rows = [(a["action"], a["actor"], a["via"]) for a in view["audit"]]
    assert rows == [
        ("condemned", "ops-bot", "library"),
        ("unwound", "ops-bot", "library"),
        ("compensation-approved", "alice", "console"),
    ]
    assert view["audit"][1]["summary"] == "awaiting-approval: 1, not-attempted: 1 (not complete)"


def test_a_condemned_runs_call_cannot_be_approved_and_bad_decisions_are_400(
    app: TestClient, tokens: Tokens, tools: dict[str, Any]
) -> None:
    run_id = suspended(app, tools)
    assert decide(app, tokens.operator, run_id, decision="maybe", target="call-2").status_code == 400
    assert decide(app, tokens.operator, run_id, decision="approve").status_code == 400
    assert decide(app, tokens.operator, run_id, decision="approve", target="call-2").status_code == 400
    ok = {"reason": "checked"}
    assert decide(app, tokens.operator, run_id, decision="approve", target="call-9", **ok).status_code == 409
    assert (
        decide(app, tokens.operator, "nope-1", decision="approve", target="call-2", **ok).status_code == 404
    )
    compensate_run(run_id, journal=journal_of(app), tools=tools)
    answer = decide(app, tokens.operator, run_id, decision="approve", target="call-2", **ok)
    assert answer.status_code == 409 and "condemned" in answer.json()["error"]
    record = journal_of(app).get_record(run_id, "call-2")
    assert record is not None and record.status is RecordStatus.SUSPENDED


def test_a_call_of_a_run_that_has_ended_cannot_be_decided_409_not_a_bad_request(
    app: TestClient, tokens: Tokens, tools: dict[str, Any]
) -> None:
    run_id = suspended(app, tools)
    journal_of(app).end_run(run_id, RunStatus.FAILED, "", "the agent gave up")
    answer = decide(app, tokens.operator, run_id, decision="approve", target="call-2", reason="ok")
    assert answer.status_code == 409, answer.text  # the request is well formed; the run's state refuses it
    assert "ended" in answer.json()["error"]
    record = journal_of(app).get_record(run_id, "call-2")
    assert record is not None and record.status is RecordStatus.SUSPENDED


def test_the_decide_form_needs_the_csrf_token_from_a_browser_and_then_denies_as_the_console_user(
    app: TestClient, tokens: Tokens, tools: dict[str, Any]
) -> None:
    run_id = suspended(app, tools)
    assert app.post("/login", data={"token": tokens.operator}, follow_redirects=False).status_code == 303
    page = app.get(f"/runs/{run_id}")
    assert page.status_code == 200 and "Waiting for a person" in page.text and "Approve" in page.text
    form = {"decision": "deny", "target": "call-2", "reason": "looks like fraud"}
    assert app.post(f"/runs/{run_id}/decide", data=form, follow_redirects=False).status_code == 403
    csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    # A denial needs its confirmation (and a reason), like a compensation.
    assert app.post(f"/runs/{run_id}/decide", data={**form, "csrf": csrf}).status_code == 400
    form["confirm"] = "yes"
    answer = app.post(f"/runs/{run_id}/decide", data={**form, "csrf": csrf}, follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"].startswith(f"/runs/{run_id}?watch=1&notice=")
    landed = app.get(answer.headers["location"])
    assert "Denied call-2" in landed.text
    record = journal_of(app).get_record(run_id, "call-2")
    assert record is not None and record.status is RecordStatus.DENIED
    page = app.get(f"/runs/{run_id}")
    assert "Nothing recorded yet" not in page.text and "looks like fraud" in page.text
    assert "Waiting for a person" not in page.text
