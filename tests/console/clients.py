"""The console under test, reached through its test client."""

from __future__ import annotations

import re
import uuid
from typing import Any

from starlette.applications import Starlette
from starlette.testclient import TestClient

from saga_worker import Journal, run_durable, scripted
from saga_worker.console.app import create_app
from saga_worker.console.service import Console
from saga_worker.executor.context import WorkerContext
from saga_worker.settings import SagaSettings
from tests.ledger import MemoryLedger, order_script, order_tools

BASE = "http://127.0.0.1:8350"  # a host the console answers to by default (loopback)


class Sent:
    """What the console hands the workers (the real enqueue is ``saga.compensate_run.delay``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []
        self.audit: list[dict[str, str]] = []
        self.task_ids: list[str] = []
        self.parallel: list[str] = []  # the runs whose unwind was asked for with parallel=True

    def __call__(
        self,
        run_id: str,
        dry_run: bool,
        *,
        actor: str,
        reason: str,
        via: str,
        task_id: str | None = None,
        parallel: bool = False,
    ) -> str:
        self.calls.append((run_id, dry_run))
        if parallel:
            self.parallel.append(run_id)
        self.audit.append({"actor": actor, "reason": reason, "via": via})
        self.task_ids.append(task_id or f"task-{len(self.calls)}")
        return self.task_ids[-1]


def no_workers() -> list[str]:
    """Nobody consumes the queue here (the enqueue is recorded, not sent)."""
    return []


def client_for(settings: SagaSettings, tools: dict[str, Any], sent: Sent, **kwargs: Any) -> TestClient:
    """The console on ``settings`` running ``tools`` in-process, its unwinds recorded in ``sent``."""
    context = WorkerContext(settings, tools=lambda: tools)
    health = kwargs.pop("health", lambda: None)  # no fleet in the header unless a test gives one
    console = create_app(settings, context=context, enqueue=sent, workers=no_workers, health=health)
    return TestClient(console, base_url=BASE, **kwargs)


def place(app: TestClient, ledger: MemoryLedger, prefix: str = "order") -> str:
    """A finished sample order in the console's journal; its run id."""
    run_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    journal = console_journal(app)
    run_durable(run_id, journal=journal, tools=order_tools(ledger), planner=scripted(*order_script()))
    return run_id


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def console_journal(client: TestClient) -> Journal:
    """The journal the console behind ``client`` reads and writes, whole (its worker context's: a
    test also runs and condemns runs through it)."""
    app = client.app
    assert isinstance(app, Starlette), app
    console: Console = app.state.console
    return console.context.journal


def csrf_of(html: str) -> str:
    """The CSRF token a page's forms send back (every POST a session cookie authenticates needs it)."""
    found = re.search(r'name="csrf" value="([^"]*)"', html)
    assert found is not None, "no CSRF field on the page"
    return found.group(1)
