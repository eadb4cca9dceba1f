"""The Django admin's saga-worker pages in headless Chromium (issue 50), served by `manage.py runserver`
of the test project: a superuser logs in, sees the runs and the filters, opens a run whose unwind waits
on a gated compensation, and runs a dry run. `make screenshots` (SAGA_UPDATE_SCREENSHOTS=1) writes the
docs' pictures, docs/django-admin-runs.png and docs/django-admin-run.png."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console.conftest import DOCS, free_port
from tests.integration.conftest import READY_TIMEOUT_S, wait_for

pytestmark = [pytest.mark.slow]
pytest.importorskip("playwright")
from playwright.sync_api import Page, expect  # noqa: E402

PROJECT = Path(__file__).resolve().parent / "project"
SEED = """
from django.contrib.auth.models import User
from saga_worker import ToolCall, compensate_run, run_durable, scripted
from saga_worker.contrib.django import journal, tools
User.objects.create_superuser("alice", "alice@example.com", "correct horse battery staple")
j, t = journal(), tools()
order = scripted(ToolCall("pay", {"amount": 30}), ToolCall("reserve", {"sku": "A1"}), final="ok")
run_durable("shop-order-41", journal=j, tools=t, planner=order)
compensate_run("shop-order-41", journal=j, tools=t, actor="bob", reason="customer cancelled")
run_durable("shop-order-42", journal=j, tools=t, planner=order)
run_durable("shop-refund-43", journal=j, tools=t, planner=scripted(ToolCall("refund", {"amount": 30})))
"""


@pytest.fixture
def site(tmp_path: Path) -> Iterator[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAGA_", "DJANGO_", "PYTHONPATH"))}
    env.update(PROJ_DATABASE_URL=f"sqlite:///{tmp_path}/proj.db", SAGA_ACTOR="bob")

    def manage(*args: str) -> None:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr

    manage("migrate", "--noinput")
    manage("shell", "-c", SEED)
    port = free_port()
    log = open(tmp_path / "runserver.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload", "--insecure"],
        cwd=PROJECT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert server.poll() is None, (tmp_path / "runserver.log").read_text()
        try:
            with urllib.request.urlopen(f"{url}/admin/login/", timeout=2):
                return True
        except OSError:
            return False

    try:
        wait_for(up, READY_TIMEOUT_S, "runserver")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_a_superuser_sees_the_runs_a_gated_unwind_and_a_dry_run_in_the_admin(
    chromium: Any, site: str
) -> None:
    page: Page = chromium.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(f"{site}/admin/login/?next=/admin/saga_worker/run/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "correct horse battery staple")
    page.click("input[type=submit]")
    expect(page.locator("#result_list")).to_contain_text("shop-order-41")
    expect(page.locator("#result_list")).to_contain_text("shop-refund-43")
    expect(page.locator("#changelist-filter")).to_contain_text("Needs a person")
    page.screenshot(path=str(DOCS / "django-admin-runs.png"), full_page=True)

    page.click("text=shop-order-41")
    expect(page.locator("#decisions")).to_contain_text("a gated compensation")
    expect(page.locator("#audit")).to_contain_text("customer cancelled")
    page.screenshot(path=str(DOCS / "django-admin-run.png"), full_page=True)

    page.goto(f"{site}/admin/saga_worker/run/shop-order-42/")
    page.click("#dry-run")
    expect(page.locator("#plan")).to_contain_text("would-compensate")
    expect(page.locator("#confirm-compensate")).to_be_visible()
