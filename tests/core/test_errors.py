"""saga-worker's errors read back as themselves: through pickle and through Celery's result backend
(JSON and pickle), which rebuild an exception as ``type(exc)(*exc.args)`` (issue 21, item 10)."""

from __future__ import annotations

import pickle
import uuid

import pytest
from celery import Celery

from saga_worker import (
    ApprovalError,
    CompensatedRunError,
    MalformedRecordError,
    ReplayMismatchError,
    RunExistsError,
    SagaError,
    SideEffectRetryBlockedError,
    ToolFailedError,
    UnknownRunError,
    UnknownToolError,
)
from saga_worker.core.redact import redact_exception
from saga_worker.errors import InvalidInputError
from saga_worker.operating.actions import ActionRefusedError

ERRORS: list[SagaError] = [
    CompensatedRunError("order-7"),
    SideEffectRetryBlockedError("order-7", "call-1", "charge", "no recover hook"),
    UnknownToolError("order-7", "refund", ["charge", "reserve"]),
    RunExistsError("order-7"),
    UnknownRunError("order-7"),
    MalformedRecordError("order-7", "call-1", "unknown status 'x'"),
    ToolFailedError("order-7", "call-1", "charge", "RuntimeError: declined"),
    ReplayMismatchError("order-7", "call-1", ("charge", "{}"), ("refund", "{}"), "use another run id"),
    ApprovalError("order-7", "call-1", "already denied"),
    ActionRefusedError("order-7", "redrive", "the run is not condemned"),
    InvalidInputError("run id 'x y' cannot be used", run_id="x y"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_an_error_pickled_and_loaded_again_says_exactly_what_it_said(error: SagaError) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error)
    assert again.detail == error.detail


@pytest.mark.parametrize("serializer", ["json", "pickle"])
@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_an_error_read_back_from_the_result_backend_says_exactly_what_it_said(
    error: SagaError, serializer: str
) -> None:
    app = Celery("errors", set_as_current=False)
    app.conf.update(
        result_backend="cache+memory://",
        result_serializer=serializer,
        result_accept_content=["json", "pickle"],
    )
    try:
        task_id = uuid.uuid4().hex
        app.backend.mark_as_failure(task_id, error)
        again = app.AsyncResult(task_id).result
        assert type(again) is type(error) and str(again) == str(error)
        assert str(error).count("order-7") == str(again).count("order-7")
    finally:
        app.close()


def test_a_rebuilt_error_is_still_redacted_in_what_it_says() -> None:
    error = ToolFailedError("order-7", "call-1", "charge", "cannot reach postgresql://u:s3cret@db/x")
    redact_exception(error)
    assert "s3cret" not in str(error) and "s3cret" not in repr(error) and "db/x" in str(error)
