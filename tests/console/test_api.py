"""The console's HTTP surface, endpoint by endpoint: who may call it, what it answers, what it
refuses. The app runs in-process (Starlette's test client) on a real SQLite journal; enqueueing is
recorded rather than sent (the browser tests send it to a real worker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from saga_worker import saga
from saga_worker.console.app import create_app
from saga_worker.console.auth import ConsoleConfigError, Role, new_token
from saga_worker.errors import JournalError
from saga_worker.executor.context import WorkerContext
from saga_worker.journal.records import UnwindState
from saga_worker.settings import SagaSettings
from tests.console.clients import BASE, Sent, bearer, console_journal, csrf_of, place
from tests.ledger import MemoryLedger, order_tools
from tests.reads import run_of

from .conftest import Tokens

# -- configuration ---------------------------------------------------------------------------------


def test_the_console_refuses_to_start_without_tokens(tmp_path: Path) -> None:
    with pytest.raises(ConsoleConfigError, match="SAGA_CONSOLE_TOKENS is not set"):
        create_app(SagaSettings(home=tmp_path), enqueue=Sent())


@pytest.mark.parametrize(
    "spec",
    ["alice:operator:plaintoken", "alice:admin:sha256:" + "0" * 64, "alice:viewer:sha256:xyz", ", ,"],
)
def test_malformed_tokens_are_refused_without_echoing_the_entry(tmp_path: Path, spec: str) -> None:
    with pytest.raises(ConsoleConfigError) as info:
        create_app(SagaSettings(home=tmp_path, console_tokens=spec), enqueue=Sent())
    assert "plaintoken" not in str(info.value) and "0" * 64 not in str(info.value)


def test_a_name_used_twice_is_refused(tmp_path: Path) -> None:
    spec = ",".join(new_token("alice", role)[1] for role in (Role.VIEWER, Role.OPERATOR))
    with pytest.raises(ConsoleConfigError, match="used twice"):
        create_app(SagaSettings(home=tmp_path, console_tokens=spec), enqueue=Sent())


# -- authentication --------------------------------------------------------------------------------

READS = [("GET", "/"), ("GET", "/api/runs"), ("GET", "/metrics"), ("GET", "/runs/order-1")]


@pytest.mark.parametrize(("method", "path"), READS)
def test_every_read_without_a_token_is_401(app: TestClient, method: str, path: str) -> None:
    assert app.request(method, path).status_code == 401
    assert app.request(method, path, headers=bearer("not-a-known-token")).status_code == 401


@pytest.mark.parametrize(
    "path", ["/api/runs/order-1/plan", "/api/runs/order-1/compensate", "/api/runs/order-1/redrive"]
)
def test_every_api_action_without_a_token_is_401(app: TestClient, path: str) -> None:
    assert app.post(path, json={"reason": "x"}).status_code == 401


def test_health_answers_without_a_token_and_says_nothing_else(app: TestClient) -> None:
    answer = app.get("/healthz")
    assert answer.status_code == 200 and answer.text == "ok"


def test_the_login_page_sets_an_httponly_strict_cookie_for_a_known_token(
    app: TestClient, tokens: Tokens
) -> None:
    assert app.post("/login", data={"token": "wrong"}).status_code == 401
    answer = app.post("/login", data={"token": tokens.viewer}, follow_redirects=False)
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert app.get("/").status_code == 200  # the cookie now authenticates
    app.post("/logout", data={"csrf": csrf_of(app.get("/").text)})
    assert app.get("/").status_code == 401


# -- the runs listing ------------------------------------------------------------------------------


def test_the_runs_listing_pages_with_a_cursor_through_every_run_once(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    placed = {place(app, ledger, "page") for _ in range(5)}
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(10):
        params: dict[str, str | int] = {
            "limit": 2,
            "search": "page-",
            **({"cursor": cursor} if cursor else {}),
        }
        body = app.get("/api/runs", params=params, headers=bearer(tokens.viewer)).json()
        assert len(body["runs"]) <= 2
        seen += [r["run_id"] for r in body["runs"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(placed) and len(seen) == len(set(seen))


def test_the_runs_listing_filters_by_condemned_unwind_state_status_and_id_prefix(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    kept, condemned, flagged = (
        place(app, ledger, "kept"),
        place(app, ledger, "gone"),
        place(app, ledger, "stuck"),
    )
    journal = console_journal(app)
    journal.condemn(condemned)
    journal.condemn(flagged)
    journal.set_unwind_state(flagged, UnwindState.ATTENTION, note="gave up")

    def ids(**params: Any) -> set[str]:
        body = app.get("/api/runs", params=params, headers=bearer(tokens.viewer)).json()
        return {r["run_id"] for r in body["runs"]}

    assert ids(condemned="yes") == {condemned, flagged}
    assert kept in ids(condemned="no") and condemned not in ids(condemned="no")
    assert ids(unwind="attention") == {flagged}
    assert ids(search="kept-") == {kept}
    assert ids(status="finished", search="gone") == {condemned}
    assert ids(status="failed") == set()


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({"status": "exploded"}, "status"),
        ({"unwind": "sideways"}, "unwind"),
        ({"condemned": "maybe"}, "condemned"),
        ({"limit": "0"}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"cursor": "!!not-a-cursor"}, "cursor"),
    ],
)
def test_a_bad_filter_is_a_400_that_names_it(
    app: TestClient, tokens: Tokens, params: dict[str, str], names: str
) -> None:
    answer = app.get("/api/runs", params=params, headers=bearer(tokens.viewer))
    assert answer.status_code == 400 and names in answer.json()["error"]
    assert app.get("/", params=params, headers=bearer(tokens.viewer)).status_code == 400


# -- one run ---------------------------------------------------------------------------------------


def test_a_run_shows_its_calls_in_execution_order_with_keys_and_previews(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    run_id = place(app, ledger)
    body = app.get(f"/api/runs/{run_id}", headers=bearer(tokens.viewer)).json()
    assert [s["tool_name"] for s in body["steps"]] == ["charge", "reserve", "notify"]
    first = body["steps"][0]
    assert first["execute_key"] == f"{run_id}:call-1" and first["compensation_key"] == f"{run_id}:comp:call-1"
    assert '"amount":10' in first["input_preview"] and first["compensation"] is None
    assert body["run"]["condemned"] is False and body["in_progress"] is False
    page = app.get(f"/runs/{run_id}", headers=bearer(tokens.viewer))
    assert page.status_code == 200 and f"{run_id}:<wbr>comp:<wbr>call-3" in page.text  # breaks only at ":"


@pytest.mark.parametrize("path", ["/api/runs/{}", "/runs/{}", "/runs/{}/live"])
def test_an_unknown_run_is_404_and_a_malformed_id_400(app: TestClient, tokens: Tokens, path: str) -> None:
    assert app.get(path.format("never-seen"), headers=bearer(tokens.viewer)).status_code == 404
    assert app.get(path.format("bad:id"), headers=bearer(tokens.viewer)).status_code == 400
    assert app.get(path.format("-leading-dash"), headers=bearer(tokens.viewer)).status_code == 400


def test_the_live_fragment_says_whether_anything_moves(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    run_id = place(app, ledger)
    journal = console_journal(app)
    assert app.get(f"/runs/{run_id}/live", headers=bearer(tokens.viewer)).headers["x-saga-moving"] == "0"
    journal.hold_sweep(run_id, 30.0, "unwind u-1 in progress")
    answer = app.get(f"/runs/{run_id}/live", headers=bearer(tokens.viewer))
    assert answer.headers["x-saga-moving"] == "1" and "unwind u-1 in progress" in answer.text


# -- actions ---------------------------------------------------------------------------------------


def test_a_plan_is_the_dry_run_report_and_writes_nothing(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    run_id = place(app, ledger)
    answer = app.post(f"/api/runs/{run_id}/plan", headers=bearer(tokens.viewer))
    assert answer.status_code == 200
    plan = answer.json()
    assert plan["dry_run"] is True and plan["condemned"] is False
    assert [e["status"] for e in plan["entries"]] == ["would-compensate"] * 3
    assert [e["suffix"] for e in plan["entries"]] == ["call-3", "call-2", "call-1"]
    assert app.get(f"/api/runs/{run_id}", headers=bearer(tokens.viewer)).json()["run"]["condemned"] is False
    assert app.post("/api/runs/never-seen/plan", headers=bearer(tokens.viewer)).status_code == 404


def test_compensate_needs_an_operator_and_a_reason_then_enqueues_the_unwind(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens, sent: Sent
) -> None:
    run_id = place(app, ledger)
    url = f"/api/runs/{run_id}/compensate"
    assert app.post(url, json={"reason": "x"}, headers=bearer(tokens.viewer)).status_code == 403
    assert app.post(url, json={}, headers=bearer(tokens.operator)).status_code == 400
    assert app.post(url, json={"reason": "   "}, headers=bearer(tokens.operator)).status_code == 400
    assert app.post(url, content=b"not json", headers=bearer(tokens.operator)).status_code == 400
    assert sent.calls == []
    answer = app.post(url, json={"reason": "customer cancelled"}, headers=bearer(tokens.operator))
    assert answer.status_code == 202
    assert answer.json()["task_id"] == sent.task_ids[0] and answer.json()["actor"] == "alice"
    assert answer.json()["workers"] == [] and "no worker consumes" in answer.json()["workers_note"]
    assert sent.calls == [(run_id, False)]
    assert sent.audit == [{"actor": "alice", "reason": "customer cancelled", "via": "console"}]
    assert (
        app.post(
            "/api/runs/never-seen/compensate", json={"reason": "x"}, headers=bearer(tokens.operator)
        ).status_code
        == 404
    )
    assert (
        app.post(
            "/api/runs/bad:id/compensate", json={"reason": "x"}, headers=bearer(tokens.operator)
        ).status_code
        == 400
    )


def test_compensate_with_parallel_sends_the_grouped_unwind_and_refuses_a_parallel_that_is_not_a_boolean(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens, sent: Sent
) -> None:
    """Issue 47: the console asks for a parallel unwind on the workers (``parallel`` in the task's
    message only then); anything but true or false is refused before anything is sent."""
    plain, grouped = place(app, ledger), place(app, ledger)
    operator = bearer(tokens.operator)
    refused = app.post(
        f"/api/runs/{grouped}/compensate", json={"reason": "x", "parallel": "yes"}, headers=operator
    )
    assert refused.status_code == 400 and "parallel must be true or false" in refused.text
    assert sent.calls == []
    assert (
        app.post(f"/api/runs/{plain}/compensate", json={"reason": "plain"}, headers=operator).status_code
        == 202
    )
    answer = app.post(
        f"/api/runs/{grouped}/compensate", json={"reason": "side by side", "parallel": True}, headers=operator
    )
    assert answer.status_code == 202
    assert sent.calls == [(plain, False), (grouped, False)] and sent.parallel == [grouped]


def test_redrive_applies_only_to_a_run_flagged_for_attention(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens, sent: Sent
) -> None:
    run_id = place(app, ledger)
    url = f"/api/runs/{run_id}/redrive"
    assert app.post(url, headers=bearer(tokens.operator)).status_code == 409
    journal = console_journal(app)
    journal.condemn(run_id)
    journal.set_unwind_state(run_id, UnwindState.ATTENTION, note="gave up after 8 re-drives")
    assert app.post(url, headers=bearer(tokens.viewer)).status_code == 403
    answer = app.post(url, headers=bearer(tokens.operator))
    assert answer.status_code == 202 and sent.calls == [(run_id, False)]
    run = run_of(journal, run_id)
    # Held off the sweeper while the unwind starts; no longer flagged.
    assert run.unwind_state is UnwindState.PENDING and run.unwind_note == "re-driven by alice"


def test_browser_forms_need_the_csrf_token_of_the_logged_in_operator(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens, sent: Sent
) -> None:
    run_id = place(app, ledger)
    app.post("/login", data={"token": tokens.operator})
    url = f"/runs/{run_id}/compensate"
    assert app.post(url, data={"reason": "no csrf"}).status_code == 403
    assert app.post(url, data={"reason": "forged", "csrf": "0" * 64}).status_code == 403
    assert app.post(f"/runs/{run_id}/plan").status_code == 403  # the dry run too: it runs hooks' code
    csrf = csrf_of(app.get(f"/runs/{run_id}").text)
    plan = app.post(f"/runs/{run_id}/plan", data={"csrf": csrf})
    assert plan.status_code == 200 and 'id="compensate"' in plan.text
    assert app.post(url, data={"reason": "", "csrf": csrf}).status_code == 400  # a reason is required
    answer = app.post(url, data={"reason": "duplicate order", "csrf": csrf}, follow_redirects=False)
    assert (
        answer.status_code == 303
        and answer.headers["location"] == f"/runs/{run_id}?watch=1&task={sent.task_ids[0]}"
    )
    assert sent.calls == [(run_id, False)]


def test_the_plan_page_offers_a_parallel_unwind_only_for_a_run_with_a_group_and_sends_it_when_ticked(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens, sent: Sent
) -> None:
    """Issue 47: the Compensate form has a "side by side" box where the run recorded a group of
    calls (``run.parallel()``), none for a run of single steps; ticked, the unwind is sent parallel."""
    plain = place(app, ledger)
    grouped = "order-grouped-" + plain.split("-")[-1]
    with saga(grouped, journal=console_journal(app), tools=order_tools(ledger)) as run:
        run.call("charge", {"amount": 10, "currency": "EUR"})
        with run.parallel():
            run.call("reserve", {"sku": "A1", "qty": 2})
            run.call("notify", {"to": "c@example.com"})
    app.post("/login", data={"token": tokens.operator})
    csrf = csrf_of(app.get(f"/runs/{plain}").text)
    assert 'id="parallel"' not in app.post(f"/runs/{plain}/plan", data={"csrf": csrf}).text
    assert 'id="parallel"' in app.post(f"/runs/{grouped}/plan", data={"csrf": csrf}).text
    form = {"reason": "side by side", "csrf": csrf, "parallel": "1"}
    assert app.post(f"/runs/{grouped}/compensate", data=form, follow_redirects=False).status_code == 303
    assert sent.calls == [(grouped, False)] and sent.parallel == [grouped]


def test_a_viewer_sees_no_action_form_and_its_posts_are_403(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens, sent: Sent
) -> None:
    run_id = place(app, ledger)
    app.post("/login", data={"token": tokens.viewer})
    csrf = csrf_of(app.get(f"/runs/{run_id}").text)
    plan = app.post(f"/runs/{run_id}/plan", data={"csrf": csrf})
    assert plan.status_code == 200 and 'id="compensate"' not in plan.text and "You are a viewer" in plan.text
    for action in ("compensate", "redrive"):
        assert app.post(f"/runs/{run_id}/{action}", data={"reason": "x", "csrf": csrf}).status_code == 403
    assert sent.calls == []


# -- secrets ---------------------------------------------------------------------------------------


def test_no_token_or_url_password_appears_in_pages_answers_or_metrics(
    tmp_path: Path, tokens: Tokens, ledger: MemoryLedger, sent: Sent, caplog: pytest.LogCaptureFixture
) -> None:
    settings = SagaSettings(
        home=tmp_path,
        journal_url=f"sqlite:///{tmp_path}/journal.db",
        broker_url="redis://user:hunter2@127.0.0.1:6379/9",
        console_secret="s" * 32,
        console_tokens=tokens.spec,
    )
    context = WorkerContext(settings, tools=lambda: order_tools(ledger))
    with TestClient(create_app(settings, context=context, enqueue=sent), base_url=BASE) as client:
        run_id = place(client, ledger)
        journal = console_journal(client)
        journal.condemn(run_id)
        journal.set_unwind_state(
            run_id, UnwindState.INCOMPLETE, note="call-1: failed (postgresql://saga:s3cret@db/saga refused)"
        )
        client.post("/login", data={"token": tokens.operator})
        texts = [
            client.get("/").text,
            client.get(f"/runs/{run_id}").text,
            client.get(f"/runs/{run_id}/live").text,
            client.post(f"/runs/{run_id}/plan", data={"csrf": csrf_of(client.get("/").text)}).text,
            client.get(f"/api/runs/{run_id}", headers=bearer(tokens.operator)).text,
            client.get("/api/runs", headers=bearer(tokens.operator)).text,
            client.get("/metrics", headers=bearer(tokens.operator)).text,
            client.get("/api/runs/bad:id", headers=bearer(tokens.operator)).text,
        ]
    everything = "\n".join(texts + [r.getMessage() for r in caplog.records])
    assert "call-1: failed (postgresql://saga:***@db/saga refused)" in texts[1]
    for secret in (tokens.operator, tokens.viewer, "s3cret", "hunter2"):
        assert secret not in everything


def test_the_console_pointed_at_a_journal_that_does_not_exist_refuses_to_start_and_creates_nothing(
    tmp_path: Path, tokens: Tokens
) -> None:
    typo = tmp_path / "jounral.db"
    settings = SagaSettings(home=tmp_path, journal_url=f"sqlite:///{typo}", console_tokens=tokens.spec)
    with pytest.raises(JournalError) as info:
        create_app(settings, enqueue=Sent())
    assert str(typo) in str(info.value) and "saga-worker db upgrade" in str(info.value)
    assert not typo.exists()
