"""The console under test, reached through its test client."""

from __future__ import annotations

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
