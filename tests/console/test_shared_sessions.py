"""Two console processes behind one name (``uvicorn --workers 2``, two replicas behind a load
balancer): a login, its CSRF token and the queued-unwind guard hold on either, and across a restart.

Real ``saga-worker serve`` processes on loopback, a PostgreSQL journal, a Redis broker no worker
consumes (so an unwind stays queued), and headless Chromium: a browser keeps cookies per host, not
per port, so two ports of 127.0.0.1 are two processes behind one name, as a balancer shows them.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from saga_worker import run_durable, scripted
from tests.integration.conftest import REPO, Setup, make_setup, redis_db
from tests.ledger import order_script, order_tools
from tests.services import REDIS_URL, require

from .conftest import CONSOLE_SECRET, DOCS, ConsoleServer, Tokens

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]
pytest.importorskip("playwright")
from playwright.sync_api import Page, expect  # noqa: E402

WAIT_MS = 60_000
expect.set_options(timeout=WAIT_MS)


@pytest.fixture
def setup(tmp_path: Path, module_pg_url: str) -> Setup:
    require("redis")
    url = REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}"
    return make_setup(tmp_path, broker_url=url, result_backend=url, redis_url=url, journal_url=module_pg_url)


@pytest.fixture
def two_consoles(setup: Setup, tokens: Tokens, tmp_path: Path) -> Iterator[list[ConsoleServer]]:
    consoles: list[ConsoleServer] = []
    try:
        for name in ("a", "b"):
            consoles.append(ConsoleServer(setup, tokens, tmp_path / f"console-{name}.log"))
        yield consoles
    finally:
        for console in consoles:
            console.stop()


def placed(setup: Setup) -> str:
    from tests.ledger import MemoryLedger

    run_id = f"order-{uuid.uuid4().hex[:8]}"
    journal = setup.journal()
    try:
        run_durable(
            run_id, journal=journal, tools=order_tools(MemoryLedger()), planner=scripted(*order_script())
        )
    finally:
        journal.close()
    return run_id


def test_a_login_on_one_console_process_acts_on_another_and_survives_a_restart(
    setup: Setup, two_consoles: list[ConsoleServer], chromium: Any, tokens: Tokens, tmp_path: Path
) -> None:
    first, second = two_consoles
    run_id = placed(setup)
    page: Page = chromium.new_context(viewport={"width": 1440, "height": 900}).new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(first.url + "/login")
    page.fill("#token", tokens.operator)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Runs")

    # The other process knows the login, and takes the form (and its CSRF token) it served.
    page.goto(f"{second.url}/runs/{run_id}")
    expect(page.locator("h1")).to_contain_text(run_id)
    page.click("#dry-run")
    page.fill("#reason", "customer cancelled")
    page.click("#compensate")
    expect(page.locator("#queued")).to_contain_text("Unwind queued as task")
    page.screenshot(path=str(DOCS / "console-queued.png"), full_page=True)

    # A second request on the first process is refused while the first waits for a worker.
    page.goto(f"{first.url}/runs/{run_id}")
    page.click("#dry-run")
    page.fill("#reason", "clicked again")
    page.click("#compensate")
    expect(page.locator("h1")).to_have_text("Not now")
    expect(page.locator("main")).to_contain_text("has not started")

    # A restart keeps the login: the session is in the signed cookie, not in a process's memory.
    first.stop()
    restarted = ConsoleServer(setup, tokens, tmp_path / "console-a2.log", port=first.port)
    try:
        page.goto(f"{restarted.url}/runs/{run_id}")
        expect(page.locator("h1")).to_contain_text(run_id)
        expect(page.locator("form.who")).to_contain_text("alice")
    finally:
        restarted.stop()


def test_a_cookie_signed_with_another_secret_is_not_a_login(
    setup: Setup, tokens: Tokens, tmp_path: Path, chromium: Any
) -> None:
    one = ConsoleServer(setup, tokens, tmp_path / "one.log")
    other = ConsoleServer(setup, tokens, tmp_path / "other.log", SAGA_CONSOLE_SECRET="x" * 40)
    try:
        page: Page = chromium.new_context().new_page()
        page.goto(one.url + "/login")
        page.fill("#token", tokens.viewer)
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("Runs")
        page.goto(other.url + "/")
        expect(page.locator("h1")).to_have_text("Log in")
    finally:
        one.stop()
        other.stop()


def test_serve_refuses_to_start_without_a_session_secret_outside_the_embedded_default(
    setup: Setup, tokens: Tokens
) -> None:
    env = dict(setup.env(), SAGA_CONSOLE_TOKENS=tokens.spec)
    env.pop("SAGA_CONSOLE_SECRET", None)
    done = subprocess.run(
        [sys.executable, "-m", "saga_worker.cli", "serve"], cwd=REPO, env=env, capture_output=True, timeout=60
    )
    assert done.returncode != 0
    assert "SAGA_CONSOLE_SECRET" in done.stderr.decode(), done.stderr.decode()
    short = dict(env, SAGA_CONSOLE_SECRET="short")
    done = subprocess.run(
        [sys.executable, "-m", "saga_worker.cli", "serve"],
        cwd=REPO,
        env=short,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "SAGA_CONSOLE_SECRET" in done.stderr.decode() and "32" in done.stderr.decode()
    assert CONSOLE_SECRET not in done.stderr.decode()
