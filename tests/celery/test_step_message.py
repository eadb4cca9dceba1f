"""A step's message, sent by the task before it: the same whether it goes out as the step's
signature (``replace()``, under someone else's chain) or straight from the task (a plain request,
without a signature made per step), time limits included."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from saga_worker import Tool, ToolCall, executor, open_journal, run_durable, scripted
from saga_worker.celery import install
from saga_worker.celery.tasks import COMPENSATE_RUN, _send_step, _step_signature
from saga_worker.settings import SagaSettings

QUEUE = "saga-test-step-message"


def noop(*_: object) -> dict[str, bool]:
    return {"ok": True}


TOOLS = {
    "plain": Tool(execute=noop, compensate=noop),
    "timed": Tool(execute=noop, compensate=noop, compensate_timeout=5.0),
}


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Celery]:
    url = f"sqlite:///{tmp_path}/journal.db"
    made = Celery("saga_test_step_message", broker="memory://", set_as_current=False)
    install(made, settings=SagaSettings(home=tmp_path, journal_url=url, queue=QUEUE), tools=TOOLS, beat=False)
    journal = open_journal(url)
    try:
        calls = [ToolCall("plain", {"n": 1}), ToolCall("timed", {"n": 2})]
        run_durable("order-1", journal=journal, tools=TOOLS, planner=scripted(*calls), max_steps=3)
    finally:
        journal.close()
    yield made
    executor.configure(None, None)


def _sent(app: Celery) -> dict[str, Any]:
    with app.connection_for_write() as conn:
        channel: Any = conn.default_channel
        message = channel.basic_get(QUEUE, no_ack=True)
    assert message is not None
    headers = dict(message.headers)
    return {"headers": headers, "body": json.loads(message.body), "properties": message.properties.keys()}


@pytest.mark.parametrize("tool", ["plain", "timed"])
def test_a_step_sent_straight_is_the_message_its_signature_sends(app: Celery, tool: str) -> None:
    journal = executor.current().journal
    record = next(r for r in journal.list_records("order-1") if r.tool_name == tool)
    step = executor.Step("order-1", "unwind-1", record.suffix, False, 0, 2)
    task = app.tasks[COMPENSATE_RUN]
    _send_step(task, step)
    straight = _sent(app)
    _step_signature(task, step).apply_async(task_id=straight["headers"]["id"])
    signed = _sent(app)
    assert straight == signed
    assert straight["body"][0] == ["order-1", "unwind-1", record.suffix, False]
    limits = straight["headers"]["timelimit"]
    assert (limits == [None, None]) is (tool == "plain"), limits
