"""``SAGA_LOG_FORMAT=json``: log records as one JSON object a line, carrying the trace and span ids of
the span current when each was written (tracing.py), so a log backend joins them to the traces.

Used by ``saga-worker worker``/``beat`` (every handler Celery sets up) and by the other commands
(``saga-worker --log-format json``); the text format is Celery's and Python's own, untouched.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from ..settings import get_settings
from . import tracing
from .guard import failed

# Attributes every LogRecord has: anything else on a record was passed by its writer (``extra=``).
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", "trace_id", "span_id", "exception", ...}``; Celery's
    task records add ``task_id`` and ``task_name``.

    Never raises (a handler that lets a formatting error out would raise it into the run or unwind
    that logged): a message whose arguments do not fit its format is written as its format, a
    traceback that cannot be shown is left out, and ``format_error`` says what went wrong.

    Hand-written: python-json-logger's formatter raises on such a message
    (test_a_log_line_json_cannot_format_is_still_written_and_the_unwind_goes_on) and writes every
    ``extra=`` (Celery's ``data``: a task's arguments), which
    test_a_json_line_holds_exactly_the_fields_log_pipelines_parse_and_nothing_passed_as_extra refuses."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
        }
        try:
            out["message"] = record.getMessage()
        except Exception as exc:  # noqa: BLE001 - the line is still written, with what went wrong
            out["message"] = _text(record.msg)
            out["format_error"] = _failure(exc)
        ids = tracing.current_ids()
        if ids is not None:
            out["trace_id"], out["span_id"] = ids
        if record.exc_info:
            try:
                out["exception"] = self.formatException(record.exc_info)
            except Exception as exc:  # noqa: BLE001 - as the message's
                out["format_error"] = _failure(exc)
        for key in ("task_id", "task_name"):
            value = getattr(record, key, None)
            if isinstance(value, str) and value != "???":
                out[key] = value
        return json.dumps(out, ensure_ascii=False, default=_text)


def _text(value: object) -> str:
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - a value that cannot be shown is named by its type
        return f"<{type(value).__name__}>"


def _failure(exc: Exception) -> str:
    failed("formatting a log line as JSON")
    return f"{type(exc).__name__}: {_text(exc)}"


def use_json(logger: logging.Logger | None = None) -> None:
    """Give every handler of ``logger`` (the root logger by default) the JSON formatter."""
    for handler in (logger or logging.getLogger()).handlers:
        handler.setFormatter(JsonFormatter())


def json_if_asked(logger: logging.Logger | None = None) -> None:
    """``use_json`` when ``SAGA_LOG_FORMAT=json``; nothing otherwise."""
    if get_settings().log_format == "json":
        use_json(logger)


__all__ = ["JsonFormatter", "json_if_asked", "use_json"]
