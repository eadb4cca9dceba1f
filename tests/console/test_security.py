"""The console attacked from loopback (issue 23): one test per finding, each of which failed on the
console before its fix. In process (Starlette's test client, which calls itself ``127.0.0.1`` here so
the default host allow-list admits it) on a real SQLite journal, and PostgreSQL where the journal's
URL itself is the secret."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from saga_worker import ToolCall, open_journal, run_durable, scripted
from saga_worker.console.app import create_app
from saga_worker.executor.context import WorkerContext
from saga_worker.settings import SagaSettings
from tests.console.clients import BASE, Sent, bearer, client_for, console_journal, csrf_of, place
from tests.ledger import MemoryLedger, order_script, order_tools

from .conftest import Tokens


def log_in(client: TestClient, token: str) -> None:
    """As a browser does: the login form, with the CSRF token of the session it may already hold."""
    found = re.search(r'name="csrf" value="([^"]*)"', client.get("/login").text)
    form = {"token": token, **({"csrf": found.group(1)} if found else {})}
    answer = client.post("/login", data=form, follow_redirects=False)
    assert answer.status_code == 303, answer.text


# -- the configuration is not for strangers ---------------------------------------------------------


@pytest.mark.postgres
def test_nothing_of_the_configuration_shows_before_login_and_only_the_backend_kind_and_host_after(
    pg_database_url: str, tmp_path: Path, tokens: Tokens, ledger: MemoryLedger
) -> None:
    # PostgreSQL here trusts loopback, so a password full of quotes, '<' and spaces still connects.
    password = 'p"a<ss w`ord>'
    url = sa.engine.make_url(pg_database_url)
    journal_url = (
        f"postgresql+psycopg://{url.username}:{password}@127.0.0.1:{url.port or 5432}/{url.database}"
    )
    settings = SagaSettings(home=tmp_path, journal_url=journal_url, console_tokens=tokens.spec)
    with client_for(settings, order_tools(ledger), Sent()) as client:
        strangers = [
            client.get("/login").text,
            client.get("/").text,  # 401: the login page
            client.get("/runs/bad:id").text,
            client.post("/login", data={"token": "wrong"}).text,
        ]
        for text in strangers:
            assert "postgresql" not in text and "127.0.0.1" not in text and str(url.database) not in text
        log_in(client, tokens.viewer)
        seen = [client.get("/").text, client.get("/runs/bad:id").text, client.get("/runs/never-seen").text]
    for text in seen:
        assert 'class="journal"' in text and "postgresql" in text and "127.0.0.1" in text
    for text in strangers + seen:
        for secret in ("p&#34;a", "p&quot;a", "ss w", "w`ord", str(url.username) + ":", str(url.database)):
            assert secret not in text, secret


# -- DNS rebinding --------------------------------------------------------------------------------


def test_a_host_header_not_configured_is_refused_before_anything_else(
    tmp_path: Path, tokens: Tokens, ledger: MemoryLedger
) -> None:
    settings = SagaSettings(
        home=tmp_path,
        journal_url=f"sqlite:///{tmp_path}/journal.db",
        console_tokens=tokens.spec,
        console_allowed_hosts="console.example.com",
    )
    with client_for(settings, order_tools(ledger), Sent()) as client:
        for host in ("evil.example", "127.0.0.1.evil.example", "attacker.console.example.com"):
            for path in ("/", "/login", "/api/runs", "/metrics"):
                answer = client.get(path, headers={"Host": host, **bearer(tokens.viewer)})
                assert answer.status_code == 400, (host, path)
                assert "runs" not in answer.text.lower() or "host" in answer.text.lower()
        ok = client.get("/api/runs", headers={"Host": "console.example.com:8443", **bearer(tokens.viewer)})
        assert ok.status_code == 200
    # Unconfigured, only loopback names are served.
    with client_for(
        settings.model_copy(update={"console_allowed_hosts": ""}), order_tools(ledger), Sent()
    ) as client:
        assert client.get("/api/runs", headers=bearer(tokens.viewer)).status_code == 200
        assert (
            client.get("/api/runs", headers={"Host": "localhost:8350", **bearer(tokens.viewer)}).status_code
            == 200
        )
        assert (
            client.get("/api/runs", headers={"Host": "[::1]:8350", **bearer(tokens.viewer)}).status_code
            == 200
        )
        refused = client.get("/api/runs", headers={"Host": "rebound.example", **bearer(tokens.viewer)})
        # Plain text, nothing of the console: not its JSON, not its pages, not its security headers' absence.
        assert refused.status_code == 400 and refused.headers["content-type"].startswith("text/plain")
        assert (
            "run" not in refused.text.lower()
            and "frame-ancestors 'none'" in refused.headers["content-security-policy"]
        )


# -- cross-site posts -----------------------------------------------------------------------------


def test_every_post_from_another_origin_is_refused_login_and_logout_included(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    evil = {"Origin": "http://evil.example"}
    answer = app.post("/login", data={"token": tokens.viewer}, headers=evil, follow_redirects=False)
    assert answer.status_code == 403 and "set-cookie" not in answer.headers  # no login CSRF
    cross = {"Sec-Fetch-Site": "cross-site"}
    assert app.post("/login", data={"token": tokens.viewer}, headers=cross).status_code == 403
    log_in(app, tokens.operator)
    assert app.post("/logout", headers=evil, follow_redirects=False).status_code == 403
    assert app.get("/").status_code == 200  # still logged in
    run_id = place(app, ledger)
    csrf = csrf_of(app.get(f"/runs/{run_id}").text)
    form = {"csrf": csrf, "reason": "forged"}
    assert app.post(f"/runs/{run_id}/compensate", data=form, headers=evil).status_code == 403
    assert app.post(f"/runs/{run_id}/plan", data=form, headers={"Origin": "null"}).status_code == 403
    api = {**evil, **bearer(tokens.operator)}
    assert app.post(f"/api/runs/{run_id}/compensate", json={"reason": "x"}, headers=api).status_code == 403
    # The console's own origin, and a program that sends none, still work.
    same = {"Origin": BASE}
    assert app.post(f"/runs/{run_id}/plan", data=form, headers=same).status_code == 200
    assert app.post(f"/api/runs/{run_id}/plan", headers=bearer(tokens.viewer)).status_code == 200
    assert app.post("/logout", data={"csrf": csrf}, headers=same, follow_redirects=False).status_code == 303


# -- sessions and CSRF --------------------------------------------------------------------------------


def test_a_login_is_a_server_side_session_with_its_own_csrf_secret_revoked_at_logout_and_expiring(
    tmp_path: Path, settings: SagaSettings, ledger: MemoryLedger, tokens: Tokens
) -> None:
    with (
        client_for(settings, order_tools(ledger), Sent()) as first,
        client_for(settings, order_tools(ledger), Sent()) as second,
    ):
        log_in(first, tokens.operator)
        log_in(second, tokens.operator)
        cookie_1, cookie_2 = first.cookies.get("saga_console"), second.cookies.get("saga_console")
        assert cookie_1 and cookie_2 and cookie_1 != cookie_2
        assert tokens.operator not in cookie_1 and tokens.operator not in cookie_2
        run_id = place(first, ledger)
        csrf_1, csrf_2 = (csrf_of(c.get(f"/runs/{run_id}").text) for c in (first, second))
        assert csrf_1 != csrf_2
        # Not derivable from SAGA_CONSOLE_TOKENS (the old token was an HMAC of the token's digest).
        import hashlib
        import hmac

        digest = tokens.spec.split(",")[0].rsplit(":", 1)[1]
        derived = hmac.new(bytes.fromhex(digest), b"saga-console-csrf", hashlib.sha256).hexdigest()
        assert derived not in (csrf_1, csrf_2)
        # A session's CSRF token does not work with another session.
        assert first.post(f"/runs/{run_id}/redrive", data={"csrf": csrf_2}).status_code == 403

        # Logout revokes the session on the server: the old cookie, replayed, is refused.
        assert first.post("/logout", data={"csrf": csrf_1}, follow_redirects=False).status_code == 303
        first.cookies.set("saga_console", cookie_1)
        assert first.get("/").status_code == 401
        assert second.get("/").status_code == 200

    short = settings.model_copy(update={"console_session_ttl": 1.0})
    with client_for(short, order_tools(ledger), Sent()) as client:
        log_in(client, tokens.viewer)
        assert client.get("/").status_code == 200
        time.sleep(1.2)
        assert client.get("/").status_code == 401


def test_a_new_login_gets_a_new_csrf_token_and_the_old_one_is_refused(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    """The CSRF secret belongs to the login session, not to the browser: a token seen before a logout
    (in a page, a cache, a log) forges nothing for the next login."""
    log_in(app, tokens.operator)
    run_id = place(app, ledger)
    before = csrf_of(app.get(f"/runs/{run_id}").text)
    assert app.post("/logout", data={"csrf": before}, follow_redirects=False).status_code == 303
    log_in(app, tokens.operator)
    after = csrf_of(app.get(f"/runs/{run_id}").text)
    assert after != before
    answer = app.post(f"/runs/{run_id}/compensate", data={"csrf": before, "reason": "stale token"})
    assert answer.status_code == 403 and "CSRF" in answer.text
    assert not console_journal(app).get_run(run_id).condemned  # type: ignore[union-attr]


def unsafe_routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """Every (method, path template) of the app that changes something, mounts included."""
    for route in routes:
        if isinstance(route, Mount):
            yield from unsafe_routes(route.routes, prefix + route.path)
        elif isinstance(route, Route):
            for method in sorted((route.methods or set()) & {"POST", "PUT", "PATCH", "DELETE"}):
                yield method, prefix + route.path_format


def test_every_post_route_refuses_a_cookie_session_without_its_csrf_token(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    """Walks the app's routes, so a route added later cannot skip the check (issue 43)."""
    log_in(app, tokens.operator)
    run_id = place(app, ledger)
    assert isinstance(app.app, Starlette)
    found = list(unsafe_routes(app.app.routes))
    paths = {path for _, path in found}
    assert {"/login", "/logout", "/runs/{run_id}/plan", "/api/runs/{run_id}/plan"} <= paths, paths
    fields = {"reason": "forged", "decision": "approve", "target": "call-1", "token": tokens.viewer}
    for method, template in found:
        path = template.replace("{run_id}", run_id)
        for body in ({"data": fields}, {"data": {**fields, "csrf": "not-the-session's"}}, {"json": fields}):
            answer = app.request(method, path, **body, follow_redirects=False)  # type: ignore[arg-type]
            assert answer.status_code == 403 and "CSRF" in answer.text, (method, path, body, answer.text)
            assert "set-cookie" not in answer.headers, (method, path)
        wrong = app.request(method, path, json=fields, headers={"X-CSRF-Token": "not-the-session's"})
        assert wrong.status_code == 403, (method, path)
    assert app.get("/").text.count("log out") == 1  # still logged in, as the operator
    journal = console_journal(app)
    assert not journal.get_run(run_id).condemned and journal.read_audit(run_id) == []  # type: ignore[union-attr]
    # The session's own token passes, as a form field or a header; a program's Bearer token needs none.
    csrf = csrf_of(app.get(f"/runs/{run_id}").text)
    assert app.post(f"/runs/{run_id}/plan", data={"csrf": csrf}).status_code == 200
    assert app.post(f"/api/runs/{run_id}/plan", headers={"X-CSRF-Token": csrf}).status_code == 200
    assert app.post(f"/api/runs/{run_id}/plan", headers=bearer(tokens.viewer)).status_code == 200
    # The login page a logged-in browser shows carries its session's token, so logging in again works.
    relogin = {"token": tokens.viewer, "csrf": csrf_of(app.get("/login").text)}
    assert app.post("/login", data=relogin, follow_redirects=False).status_code == 303
    csrf = csrf_of(app.get(f"/runs/{run_id}").text)
    assert app.post("/logout", data={"csrf": csrf}, follow_redirects=False).status_code == 303
    assert app.get("/").status_code == 401


# -- headers ----------------------------------------------------------------------------------------


def test_every_answer_carries_the_security_headers_and_pages_hold_no_inline_script(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    run_id = place(app, ledger)
    log_in(app, tokens.operator)
    answers = {
        "login": app.get("/login"),
        "runs": app.get("/"),
        "run": app.get(f"/runs/{run_id}"),
        "live": app.get(f"/runs/{run_id}/live"),
        "api": app.get(f"/api/runs/{run_id}", headers=bearer(tokens.viewer)),
        "error": app.get("/runs/bad:id"),
        "metrics": app.get("/metrics", headers=bearer(tokens.viewer)),
    }
    for name, answer in answers.items():
        csp = answer.headers.get("content-security-policy", "")
        directives = {d.strip().split(" ", 1)[0]: d.strip() for d in csp.split(";") if d.strip()}
        assert "frame-ancestors 'none'" in csp, name
        script = directives.get("script-src") or directives.get("default-src", "")
        assert script and "'unsafe-inline'" not in script and "'unsafe-eval'" not in script, name
        assert answer.headers.get("x-content-type-options") == "nosniff", name
        assert answer.headers.get("referrer-policy") in ("no-referrer", "same-origin"), name
        assert "no-store" in answer.headers.get("cache-control", ""), name
        if answer.headers.get("content-type", "").startswith("text/html"):
            assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", answer.text), name  # no inline script
            assert not re.search(r"\son[a-z]+\s*=", answer.text), name  # no inline handlers
    static = app.get("/static/console.js")
    assert static.status_code == 200 and static.headers.get("x-content-type-options") == "nosniff"
    policy = answers["login"].headers["content-security-policy"]
    for answer in (*answers.values(), static):  # each header once, the same policy everywhere
        assert answer.headers.get_list("content-security-policy") == [policy]
        assert answer.headers.get_list("cache-control") == ["no-store"]


def test_cookies_are_secure_behind_a_trusted_tls_proxy_and_only_then(
    tmp_path: Path, settings: SagaSettings, ledger: MemoryLedger, tokens: Tokens
) -> None:
    via_tls = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
    trusted = settings.model_copy(update={"console_trusted_proxies": "10.0.0.0/8"})
    with client_for(trusted, order_tools(ledger), Sent(), client=("10.1.2.3", 40000)) as proxy:
        answer = proxy.post("/login", data={"token": tokens.viewer}, headers=via_tls, follow_redirects=False)
        assert answer.status_code == 303 and "secure" in answer.headers["set-cookie"].lower()
    # A proxy that rewrites Host to the console's address says what the browser asked for instead.
    named = trusted.model_copy(update={"console_allowed_hosts": "console.example.com"})
    with client_for(named, order_tools(ledger), Sent(), client=("10.1.2.3", 40000)) as proxy:
        browser = {"X-Forwarded-Host": "console.example.com", "Origin": "https://console.example.com"}
        answer = proxy.post(
            "/login", data={"token": tokens.viewer}, headers={**via_tls, **browser}, follow_redirects=False
        )
        assert answer.status_code == 303
        forged = {**via_tls, "X-Forwarded-Host": "console.example.com", "Origin": "https://evil.example"}
        assert proxy.post("/login", data={"token": tokens.viewer}, headers=forged).status_code == 403
    # Behind a chain of trusted proxies, the client is the nearest address none of them owns.
    limited = trusted.model_copy(update={"console_login_attempts": 1})
    with client_for(limited, order_tools(ledger), Sent(), client=("10.1.2.3", 40000)) as proxy:
        chain = {"X-Forwarded-For": "198.51.100.8, 10.9.9.9"}
        assert proxy.post("/login", data={"token": "guess"}, headers=chain).status_code == 401
        assert proxy.post("/login", data={"token": "guess-2"}, headers=chain).status_code == 429
        other = {"X-Forwarded-For": "198.51.100.9, 10.9.9.9"}
        assert proxy.post("/login", data={"token": "guess-3"}, headers=other).status_code == 401
    with client_for(named, order_tools(ledger), Sent(), client=("192.0.2.9", 40000)) as direct:
        # Not from the proxy: its X-Forwarded-Host is not believed, its Host is checked.
        spoofed = {"X-Forwarded-Host": "console.example.com", "Host": "evil.example"}
        assert direct.get("/login", headers=spoofed).status_code == 400
    with client_for(trusted, order_tools(ledger), Sent(), client=("192.0.2.9", 40000)) as stranger:
        answer = stranger.post(
            "/login", data={"token": tokens.viewer}, headers=via_tls, follow_redirects=False
        )
        assert answer.status_code == 303 and "secure" not in answer.headers["set-cookie"].lower()
    with client_for(settings, order_tools(ledger), Sent(), client=("10.1.2.3", 40000)) as untrusted_proxy:
        answer = untrusted_proxy.post(
            "/login", data={"token": tokens.viewer}, headers=via_tls, follow_redirects=False
        )
        assert "secure" not in answer.headers["set-cookie"].lower()


def test_serving_on_a_non_loopback_address_over_plain_http_warns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tokens: Tokens
) -> None:
    import uvicorn

    from saga_worker.cli import main as cli
    from saga_worker.settings import get_settings

    served: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(kw))
    monkeypatch.setenv("SAGA_CONSOLE_TOKENS", tokens.spec)
    monkeypatch.setenv("SAGA_HOME", str(tmp_path))
    open_journal(f"sqlite:///{tmp_path / 'journal.db'}").close()  # the console reads one that exists
    get_settings.cache_clear()
    try:
        loud = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0"])
        quiet = CliRunner().invoke(cli, ["serve", "--host", "127.0.0.1"])
    finally:
        get_settings.cache_clear()
    assert loud.exit_code == 0 and quiet.exit_code == 0, loud.output + quiet.output
    assert "plain HTTP" in loud.output and "0.0.0.0" in loud.output
    assert "plain HTTP" not in quiet.output
    assert [s["host"] for s in served] == ["0.0.0.0", "127.0.0.1"]


# -- malformed input ------------------------------------------------------------------------------


def test_a_crafted_cursor_or_a_json_body_nested_5000_deep_is_a_400_not_a_500(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    import base64

    deep = "[" * 5000 + "]" * 5000
    cursor = base64.urlsafe_b64encode(deep.encode()).decode().rstrip("=")
    for path in ("/api/runs", "/"):
        answer = app.get(path, params={"cursor": cursor}, headers=bearer(tokens.viewer))
        assert answer.status_code == 400 and "cursor" in answer.text, path
    run_id = place(app, ledger)
    body = '{"reason": ' + deep + "}"
    for action in ("compensate", "decide"):
        answer = app.post(f"/api/runs/{run_id}/{action}", content=body, headers=bearer(tokens.operator))
        assert answer.status_code == 400 and "JSON" in answer.json()["error"], action
    huge = json.dumps({"reason": "x" * 2_000_000})
    answer = app.post(f"/api/runs/{run_id}/compensate", content=huge, headers=bearer(tokens.operator))
    assert answer.status_code in (400, 413)


@pytest.mark.parametrize(
    "position", ['[NaN,"a"]', '[Infinity,"a"]', '[-Infinity,"a"]', '[1e999,"a"]', "[" + "9" * 400 + ',"a"]']
)
def test_a_cursor_with_a_time_no_run_can_have_is_a_400_on_the_api_and_the_page(
    app: TestClient, tokens: Tokens, position: str
) -> None:
    import base64

    cursor = base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")
    for path in ("/api/runs", "/"):
        answer = app.get(path, params={"cursor": cursor}, headers=bearer(tokens.viewer))
        assert answer.status_code == 400 and "cursor" in answer.text, (path, answer.status_code)


def test_a_body_larger_than_a_login_needs_is_refused_before_the_caller_is_known(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    """Nothing reads a stranger's 20 MB upload: before authentication a body may hold a token and a
    CSRF token, no more (issue 43)."""
    run_id = place(app, ledger)
    big = "x" * 20_000_000
    answers = {
        "form": app.post("/login", data={"token": big}),
        "multipart": app.post("/login", files={"token": ("token.txt", big.encode())}),
        "chunked": app.post(
            "/login",
            content=(b"token=" + b"x" * 65_536 for _ in range(40)),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        ),
        "page form": app.post(f"/runs/{run_id}/compensate", data={"reason": "x" * 10_000}),
        "api": app.post(f"/api/runs/{run_id}/compensate", json={"reason": "x" * 10_000}),
        "wrong bearer": app.post(
            f"/api/runs/{run_id}/compensate", json={"reason": "x" * 10_000}, headers=bearer("guess")
        ),
    }
    for name, answer in answers.items():
        assert answer.status_code == 413 and "set-cookie" not in answer.headers, (name, answer.status_code)
    assert app.get(f"/api/runs/{run_id}", headers=bearer(tokens.viewer)).json()["run"]["condemned"] is False
    # A login fits; a known caller's longest reason (2,000 characters, 12 kB url-encoded) too.
    log_in(app, tokens.operator)
    csrf = csrf_of(app.get(f"/runs/{run_id}").text)
    answer = app.post(f"/runs/{run_id}/compensate", data={"csrf": csrf, "reason": "é" * 2000})
    assert answer.status_code == 200 and 'id="queued"' in answer.text
    bigger = app.post(
        f"/api/runs/{run_id}/decide", json={"reason": "x" * 100_000}, headers=bearer(tokens.operator)
    )
    assert (
        bigger.status_code == 413 and "bytes this console reads" in bigger.json()["error"]
    )  # as /api speaks


# -- guessing tokens --------------------------------------------------------------------------------


def test_failed_logins_are_logged_and_rate_limited_per_client(
    tmp_path: Path,
    settings: SagaSettings,
    ledger: MemoryLedger,
    tokens: Tokens,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    limited = settings.model_copy(update={"console_login_attempts": 3})
    with client_for(limited, order_tools(ledger), Sent(), client=("198.51.100.4", 1)) as guesser:
        for n in range(3):
            assert guesser.post("/login", data={"token": f"guess-{n}"}).status_code == 401
        blocked = guesser.post("/login", data={"token": "guess-3"})
        assert blocked.status_code == 429 and "retry-after" in blocked.headers
        assert guesser.get("/api/runs", headers=bearer("guess-api")).status_code == 429
        assert "set-cookie" not in blocked.headers
    with client_for(limited, order_tools(ledger), Sent(), client=("198.51.100.5", 1)) as neighbour:
        # Another client is not held back by the first one's guesses.
        assert (
            neighbour.post("/login", data={"token": tokens.viewer}, follow_redirects=False).status_code == 303
        )
    failures = [r.getMessage() for r in caplog.records if "failed login" in r.getMessage()]
    assert len(failures) >= 3 and all("198.51.100.4" in m for m in failures)
    assert not any("guess-" in r.getMessage() for r in caplog.records)  # the guess itself is not logged


def test_a_valid_token_is_never_refused_by_the_login_limit_of_an_address_it_shares(
    settings: SagaSettings, ledger: MemoryLedger, tokens: Tokens
) -> None:
    """Everyone behind one proxy or container gateway shares an address: a guesser there must not
    lock the operators, the API's programs and Prometheus' scrape out (issue 43)."""
    limited = settings.model_copy(update={"console_login_attempts": 3})
    app = create_app(
        limited, context=WorkerContext(limited, tools=lambda: order_tools(ledger)), enqueue=Sent()
    )
    gateway = ("172.17.0.1", 1)
    with TestClient(app, base_url=BASE, client=gateway) as guesser:
        for n in range(4):
            guesser.post("/login", data={"token": f"guess-{n}"})
        assert guesser.get("/api/runs", headers=bearer("guess-api")).status_code == 429
        operator = TestClient(app, base_url=BASE, client=gateway)
        answer = operator.post("/login", data={"token": tokens.operator}, follow_redirects=False)
        assert answer.status_code == 303 and "saga_console" in answer.headers.get("set-cookie", "")
        assert operator.get("/").status_code == 200
        assert guesser.get("/api/runs", headers=bearer(tokens.viewer)).status_code == 200
        assert guesser.get("/metrics", headers=bearer(tokens.viewer)).status_code == 200
        # The guesser is still held back.
        assert guesser.post("/login", data={"token": "guess-9"}).status_code == 429


def test_a_wrong_credential_is_limited_by_itself_from_any_address(
    settings: SagaSettings, ledger: MemoryLedger, tokens: Tokens
) -> None:
    """A credential that keeps failing (a revoked token still in a scraper, one guess sprayed from
    many addresses) is counted on its own, as well as per address."""
    limited = settings.model_copy(update={"console_login_attempts": 3})
    app = create_app(
        limited, context=WorkerContext(limited, tools=lambda: order_tools(ledger)), enqueue=Sent()
    )
    with TestClient(app, base_url=BASE, client=("192.0.2.1", 1)) as first:
        assert first.get("/metrics", headers=bearer("revoked-token")).status_code == 401
        others = [TestClient(app, base_url=BASE, client=(f"192.0.2.{n}", 1)) for n in (2, 3, 4)]
        assert others[0].get("/metrics", headers=bearer("revoked-token")).status_code == 401
        assert others[1].post("/login", data={"token": "revoked-token"}).status_code == 401
        blocked = others[2].get("/metrics", headers=bearer("revoked-token"))
        assert blocked.status_code == 429 and "retry-after" in blocked.headers
        # Another credential from that address, and the valid tokens, are not held back by it.
        assert others[2].post("/login", data={"token": "another-guess"}).status_code == 401
        assert others[2].get("/metrics", headers=bearer(tokens.viewer)).status_code == 200


# -- secrets inside tool values -----------------------------------------------------------------------


def test_secrets_in_tool_values_are_redacted_by_key_name_in_pages_and_answers(
    tmp_path: Path, settings: SagaSettings, ledger: MemoryLedger, tokens: Tokens
) -> None:
    configured = settings.model_copy(update={"redact_keys": "password,token,authorization,pin"})
    with client_for(configured, order_tools(ledger), Sent()) as client:
        run_id = f"order-{uuid.uuid4().hex[:8]}"
        journal = console_journal(client)
        charge = ToolCall(
            "charge",
            {
                "amount": 10,
                "card": {"Access_Token": "tok-live-4242", "pin": "9931"},
                "headers": [{"Authorization": "Bearer sk-abc123"}],
                "db_password": "hunter22",
            },
        )
        run_durable(
            run_id, journal=journal, tools=order_tools(ledger), planner=scripted(charge, *order_script()[1:])
        )
        log_in(client, tokens.viewer)
        texts = [
            client.get(f"/runs/{run_id}").text,
            client.get(f"/runs/{run_id}/live").text,
            client.get(f"/api/runs/{run_id}", headers=bearer(tokens.viewer)).text,
        ]
    for text in texts:
        for secret in ("tok-live-4242", "9931", "sk-abc123", "hunter22"):
            assert secret not in text, secret
        assert "Access_Token" in text and "***" in text and "amount" in text


def test_a_confirmation_or_a_queued_unwind_in_a_link_cannot_be_forged(
    app: TestClient, ledger: MemoryLedger, tokens: Tokens
) -> None:
    log_in(app, tokens.operator)
    run_id = place(app, ledger)
    forged = app.get("/inbox", params={"done": "approve", "target": "call-9", "run": run_id})
    assert forged.status_code == 200 and "Approved" not in forged.text and 'id="next-step"' not in forged.text
    made_up = app.get(f"/runs/{run_id}", params={"notice": "e30.AAAA", "task": "task-1"})
    assert 'id="next-step"' not in made_up.text and 'id="queued"' not in made_up.text
    csrf = csrf_of(app.get(f"/runs/{run_id}").text)
    queued = app.post(f"/runs/{run_id}/compensate", data={"csrf": csrf, "reason": "customer cancelled"})
    assert 'id="queued"' in queued.text
    other = app.get(f"/runs/{run_id}", params={"task": "task-1"})  # not the task the journal holds
    # The page names the request the journal holds (it stays until a worker takes it), never the link's.
    assert "task-1" not in other.text and "not started" in other.text
