"""The console under test, reached through its test client."""

from __future__ import annotations

import re

from starlette.applications import Starlette
from starlette.testclient import TestClient

from saga_worker import Journal
from saga_worker.console.service import Console


def console_journal(client: TestClient) -> Journal:
    """The journal the console behind ``client`` reads and writes."""
    app = client.app
    assert isinstance(app, Starlette), app
    console: Console = app.state.console
    return console.journal


def csrf_of(html: str) -> str:
    """The CSRF token a page's forms send back (every POST a session cookie authenticates needs it)."""
    found = re.search(r'name="csrf" value="([^"]*)"', html)
    assert found is not None, "no CSRF field on the page"
    return found.group(1)
