"""SAGA_LOG_FORMAT=json / ``saga-worker --log-format json``: one JSON object a line, with the trace and
span ids of the span current when the record was written (the worker's lines: test_worker_spans.py)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

from saga_worker import compensate_run, open_journal
from saga_worker.observing.logjson import JsonFormatter

from .conftest import Spans
from .order import LOGGING_TOOLS, record_order

REPO = Path(__file__).resolve().parents[2]


def test_a_record_written_inside_a_compensate_hook_carries_that_steps_trace_and_span_ids(
    spans: Spans, run_id: str
) -> None:
    journal = open_journal("memory://")
    record_order(journal, run_id)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("shop.refunds")
    log.addHandler(handler)
    try:
        spans.clear()
        compensate_run(run_id, journal=journal, tools=LOGGING_TOOLS)
        log.warning("after the unwind")
    finally:
        log.removeHandler(handler)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    steps = {s.attributes["saga.compensation.key"]: s for s in spans.named("saga.compensate ")}
    inside = lines[:-1]
    assert len(inside) == 3
    for line in inside:
        key = line["message"].removeprefix("refunding ")
        assert line["level"] == "WARNING" and line["logger"] == "shop.refunds"
        assert (line["trace_id"], line["span_id"]) == (
            f"{steps[key].trace_id:032x}",
            f"{steps[key].span_id:016x}",
        )
    assert lines[-1]["message"] == "after the unwind" and "trace_id" not in lines[-1]


def test_the_cli_writes_its_records_as_json_lines_with_log_format_json(tmp_path: Path, run_id: str) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    journal = open_journal(url)
    record_order(journal, run_id)
    journal.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGA_")}
    env.update(SAGA_JOURNAL_URL=url, SAGA_TOOLS="tests.tracing.order:LOGGING_TOOLS", PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "saga_worker.cli", "--log-format", "json", "compensate", run_id, "--local"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert sorted(line["message"] for line in lines) == [
        f"refunding {run_id}:comp:call-{n}" for n in (1, 2, 3)
    ]
    assert all(line["level"] == "WARNING" and line["logger"] == "shop.refunds" for line in lines)


def test_a_json_line_holds_exactly_the_fields_log_pipelines_parse_and_nothing_passed_as_extra() -> None:
    """Users' pipelines parse these names; a writer's ``extra=`` (Celery's ``data`` holds a task's
    arguments) is not written, so nothing a tool was given leaks into the logs through it."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("shop.pinned")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("plain %s", "line", extra={"data": {"args": ["card-4242"]}, "secret": "hunter2"})
        try:
            raise ValueError("boom")
        except ValueError:
            log.error("failed", exc_info=True, extra={"task_id": "t-1", "task_name": "saga.compensate_run"})
        log.warning("celery's placeholder", extra={"task_id": "???", "task_name": "???"})
    finally:
        log.removeHandler(handler)
        log.propagate = True
    text = out.getvalue()
    plain, failed, placeholder = (json.loads(line) for line in text.splitlines())
    assert list(plain) == ["time", "level", "logger", "message"]
    assert (
        plain["message"] == "plain line" and plain["level"] == "WARNING" and plain["logger"] == "shop.pinned"
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", plain["time"])
    assert list(failed) == ["time", "level", "logger", "message", "exception", "task_id", "task_name"]
    assert failed["exception"].startswith("Traceback") and "ValueError: boom" in failed["exception"]
    assert (failed["task_id"], failed["task_name"]) == ("t-1", "saga.compensate_run")
    assert list(placeholder) == ["time", "level", "logger", "message"]
    assert "card-4242" not in text and "hunter2" not in text
