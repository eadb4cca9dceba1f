"""The report is stored under the coordinator's id once: the first final answer stays (a redelivery's
report, the sweeper's re-drive, a withdrawal stored before it). On Celery's Redis result backend this is
one compare-and-set (saga_worker/celery/result_store.py, a script relying on how Celery writes a
result, bounded in pyproject.toml); on any other backend, or a Celery outside the checked releases,
the stored state read, then the result stored: both paths are run here, against real Redis."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from celery import Celery, states
from celery.backends.redis import RedisBackend
from packaging.version import Version

from saga_worker.celery import result_store

REPORT = {"run_id": "r-1", "entries": [{"suffix": "call-1", "status": "compensated"}], "dry_run": False}


@pytest.fixture
def app(redis_url: str) -> Iterator[Celery]:
    app = Celery("store-once", backend=redis_url, broker="memory://", set_as_current=False)
    app.conf.result_serializer = "json"
    yield app
    _redis(app).client.close()


@pytest.fixture(params=["compare-and-set", "read-then-store"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "read-then-store":  # as a Celery outside the checked releases would
        monkeypatch.setattr(result_store, "_CHECKED", False)
    return str(request.param)


def _redis(app: Celery) -> RedisBackend:
    return cast(RedisBackend, app.backend)


def _task_id() -> str:
    return f"store-once-{uuid.uuid4().hex}"


def _meta(app: Celery, task_id: str) -> dict[str, Any]:
    return dict(app.backend.get_task_meta(task_id, cache=False))


def test_the_report_is_stored_where_nothing_is(app: Celery, path: str) -> None:
    task_id = _task_id()
    assert result_store.store_once(app.backend, task_id, REPORT) is True
    meta = _meta(app, task_id)
    assert (meta["status"], meta["result"], meta["task_id"]) == (states.SUCCESS, REPORT, task_id)
    assert app.AsyncResult(task_id).get(timeout=5) == REPORT


@pytest.mark.parametrize("final", [states.SUCCESS, states.FAILURE, states.REVOKED])
def test_a_final_answer_stored_first_stays(app: Celery, path: str, final: str) -> None:
    task_id = _task_id()
    first = {"first": True} if final == states.SUCCESS else None
    app.backend.store_result(task_id, first, final)
    before = _redis(app).client.get(_redis(app).get_key_for_task(task_id))

    assert result_store.store_once(app.backend, task_id, REPORT) is False
    assert _redis(app).client.get(_redis(app).get_key_for_task(task_id)) == before


@pytest.mark.parametrize("pending", [states.STARTED, states.RETRY])
def test_a_state_that_is_not_final_is_replaced(app: Celery, path: str, pending: str) -> None:
    task_id = _task_id()
    app.backend.store_result(task_id, None, pending)
    assert result_store.store_once(app.backend, task_id, REPORT) is True
    assert _meta(app, task_id)["status"] == states.SUCCESS


def test_both_paths_store_the_same_meta(app: Celery) -> None:
    # The script writes what Celery's own store_result writes (but the time it was done).
    one, other = _task_id(), _task_id()
    assert result_store._store_unless_ready(app.backend, one, REPORT) is True
    assert result_store.store_once_apart(app.backend, other, REPORT) is True
    metas = [_meta(app, t) for t in (one, other)]
    for meta in metas:
        meta.pop("date_done")
        meta.pop("task_id")
    assert metas[0] == metas[1]
    ttls = [_redis(app).client.ttl(_redis(app).get_key_for_task(t)) for t in (one, other)]
    expires = _redis(app).expires  # type: ignore[attr-defined]  # set by Celery's base backend, not in its stubs
    assert all(0 < t <= expires for t in ttls), ttls


def test_a_stored_value_the_script_cannot_read_is_left_to_the_read_then_store(app: Celery) -> None:
    task_id = _task_id()
    _redis(app).client.set(_redis(app).get_key_for_task(task_id), b"\x80 not json")
    assert result_store._store_unless_ready(app.backend, task_id, REPORT) is None


def test_another_serializer_goes_the_read_then_store_way(redis_url: str) -> None:
    app = Celery("store-once-pickle", backend=redis_url, broker="memory://", set_as_current=False)
    app.conf.result_serializer = "pickle"
    app.conf.accept_content = ["json", "pickle"]
    app.conf.result_accept_content = ["json", "pickle"]
    try:
        task_id = _task_id()
        assert result_store._store_unless_ready(app.backend, task_id, REPORT) is None
        assert result_store.store_once(app.backend, task_id, REPORT) is True
        assert result_store.store_once(app.backend, task_id, {"again": True}) is False
        assert _meta(app, task_id)["result"] == REPORT
    finally:
        _redis(app).client.close()


def test_the_script_is_used_only_with_a_celery_it_was_checked_against(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert result_store._celery_checked()
    for version, checked in (("5.5.0", True), ("5.7.9", True), ("5.8.0", False), ("5.4.9", False)):
        monkeypatch.setattr(result_store, "installed_version", lambda _d, v=version: Version(v))
        assert result_store._celery_checked() is checked, version
