"""The refusal of a saga message whose body cannot be decoded: logged, and stored under its task id;
a result backend that cannot store it is logged too, not passed over in silence."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from saga_worker.celery.undecodable import refuse


class Backend:
    def __init__(self, *, fails: bool) -> None:
        self.fails = fails
        self.stored: list[tuple[str, str]] = []

    def mark_as_failure(self, task_id: str, exc: BaseException, request: Any = None) -> None:
        if self.fails:
            raise ConnectionError("result backend down")
        self.stored.append((task_id, str(exc)))


def test_the_refusal_is_logged_and_stored_under_the_task_id(caplog: pytest.LogCaptureFixture) -> None:
    backend = Backend(fails=False)
    with caplog.at_level(logging.ERROR, logger="saga_worker.celery.undecodable"):
        refuse(SimpleNamespace(backend=backend), "saga.compensate_run", "task-1", ValueError("bad byte"))
    assert [t for t, _ in backend.stored] == ["task-1"]
    assert "not valid JSON" in backend.stored[0][1] and "nothing was done" in backend.stored[0][1]
    assert [r.getMessage() for r in caplog.records] == [backend.stored[0][1]]


def test_a_result_backend_that_cannot_store_the_refusal_is_named_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="saga_worker.celery.undecodable"):
        refuse(
            SimpleNamespace(backend=Backend(fails=True)), "saga.compensate_step", "task-2", ValueError("x")
        )
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "not valid JSON" in messages[0]
    assert messages[1] == "could not store the refusal of saga.compensate_step [task-2] in the result backend"
    assert caplog.records[1].exc_info is not None and "result backend down" in caplog.text
