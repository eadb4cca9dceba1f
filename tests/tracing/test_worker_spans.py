"""An unwind on a real Celery worker (Redis broker, PostgreSQL journal) of a run recorded in the
test's process: its spans as the worker's pool children export them, under Celery's own task spans,
each compensate span linked to the execute span the test's process exported."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import chain

from saga_worker import ToolCall, run_durable, scripted
from saga_worker.celery.tasks import COMPENSATE_RUN
from tests.integration.conftest import Setup, make_setup, redis_db, wait_for
from tests.ledger import order_tools
from tests.services import REDIS_URL, require
from tests.worker_process import WorkerProcess

from .conftest import Spans
from .spans import Seen, read_dir

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, pg_database_url: str) -> Setup:
    require("redis")
    url = REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}"
    tmp = tmp_path_factory.mktemp("traced")
    return make_setup(
        tmp,
        broker_url=url,
        result_backend=url,
        redis_url=url,
        journal_url=pg_database_url,
        tools="tests.integration.worker_tools:tools",
    )


@pytest.fixture(scope="module")
def worker_spans(setup: Setup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("worker-spans")
    env = {**setup.env(), "SAGA_TEST_SPANS": str(folder), "SAGA_LOG_FORMAT": "json"}
    log = folder / "worker.log"
    worker = WorkerProcess(
        ["celery", "-A", "tests.tracing.traced_app:app", "worker"], env, log, concurrency=2, beat=False
    )
    try:
        wait_for(worker.ready, 60, "the traced worker to be ready")
        yield folder
    finally:
        worker.stop()


def test_an_unwind_on_a_worker_has_step_spans_under_celerys_task_spans_linked_to_the_runs_executes(
    setup: Setup, worker_spans: Path, spans: Spans, run_id: str
) -> None:
    journal, ledger = setup.journal(), setup.ledger()
    client = setup.client()
    try:
        tools = order_tools(ledger)
        calls = [ToolCall(name, {"n": i}) for i, name in enumerate(("charge", "reserve", "notify"))]
        assert (
            run_durable(run_id, journal=journal, tools=tools, planner=scripted(*calls)).status == "finished"
        )
        executes = {s.attributes["gen_ai.tool.name"]: s for s in spans.named("execute_tool ")}
        setup.control_file(run_id, "fail", "charge")

        report = client.tasks[COMPENSATE_RUN].delay(run_id, actor="ops-ada").get(timeout=60)
    finally:
        client.close()
        ledger.close()
        journal.close()
    assert [(e["tool_name"], e["status"]) for e in report["entries"]] == [
        ("notify", "compensated"),
        ("reserve", "compensated"),
        ("charge", "failed"),
    ]

    def mine() -> list[Seen]:
        return [s for s in read_dir(worker_spans) if s.attributes.get("saga.run.id") == run_id]

    def exported() -> bool:  # a span is written when it ends: Celery's task spans end after ours
        seen = read_dir(worker_spans)
        ids = {s.span_id for s in seen}
        ours = [s for s in seen if s.attributes.get("saga.run.id") == run_id]
        return any(s.name == "saga.unwind.report" for s in ours) and all(s.parent_id in ids for s in ours)

    wait_for(exported, 30, "the unwind's spans and their parents")
    seen = read_dir(worker_spans)
    by_id = {s.span_id: s for s in seen}
    ours = mine()
    unwind = next(s for s in ours if s.name == "saga.unwind")
    assert unwind.attributes["saga.unwind.actor"] == "ops-ada"
    assert unwind.attributes["saga.unwind.via"] == "worker"
    assert unwind.attributes["saga.unwind.steps"] == 3
    report_span = next(s for s in ours if s.name == "saga.unwind.report")
    assert report_span.attributes["saga.unwind.count.compensated"] == 2
    assert report_span.attributes["saga.unwind.count.failed"] == 1
    assert report_span.attributes["saga.unwind.halted_at"] == "call-1"
    assert report_span.status == "ERROR"

    steps = {s.attributes["gen_ai.tool.name"]: s for s in ours if s.name.startswith("saga.compensate ")}
    assert {n: s.attributes["saga.compensation.status"] for n, s in steps.items()} == {
        "notify": "compensated",
        "reserve": "compensated",
        "charge": "failed",
    }
    assert steps["charge"].status == "ERROR" and steps["reserve"].status == "UNSET"
    for name, step in steps.items():
        # Celery's task span of the step is the parent, on the worker.
        parent = by_id[step.parent_id] if step.parent_id is not None else None
        assert parent is not None and parent.name == "run/saga.compensate_step", name
        assert parent.attributes.get("celery.action") == "run"
        # The link resolves to the execute span exported by the test's process.
        ((trace_id, span_id, attrs),) = step.links
        assert (trace_id, span_id) == executes[name].ids, name
        assert attrs == {"saga.link.type": "compensates"}
        assert step.service == "the-worker" and executes[name].service == "saga-tests"
    # SAGA_LOG_FORMAT=json: the worker's lines are JSON; one written while a step's task span is current
    # (the failed step's "raised" line) carries that trace and span: Celery's task span of the step.
    lines = [
        json.loads(line)
        for line in (worker_spans / "worker.log").read_text().splitlines()
        if line.startswith("{")
    ]
    failed = f"saga.compensate_step[{run_id}:call-1:"
    (raised,) = [e for e in lines if failed in e["message"] and "raised" in e["message"]]
    assert raised["trace_id"] == f"{steps['charge'].trace_id:032x}"
    assert raised["span_id"] == f"{steps['charge'].parent_id:016x}"
    # The coordinator's unwind span sits under Celery's span of saga.compensate_run.
    coordinator = by_id[unwind.parent_id] if unwind.parent_id is not None else None
    assert coordinator is not None and coordinator.name == "run/saga.compensate_run"


def test_forward_tasks_on_a_worker_build_one_run_whose_later_blocks_link_to_its_first_span(
    setup: Setup, worker_spans: Path, run_id: str
) -> None:
    client = setup.client()
    try:
        steps = [
            client.signature(f"traced.{name}", args=(run_id, {"n": i}), immutable=True)
            for i, name in enumerate(("charge", "reserve", "notify"))
        ]
        chain(*steps).apply_async().get(timeout=60)
        report = client.tasks[COMPENSATE_RUN].delay(run_id).get(timeout=60)
    finally:
        client.close()
    assert [(e["tool_name"], e["status"]) for e in report["entries"]] == [
        ("notify", "compensated"),
        ("reserve", "compensated"),
        ("charge", "compensated"),
    ]

    def mine() -> list[Seen]:
        return [s for s in read_dir(worker_spans) if s.attributes.get("saga.run.id") == run_id]

    def exported() -> bool:
        seen = read_dir(worker_spans)
        ids = {s.span_id for s in seen}
        ours = [s for s in seen if s.attributes.get("saga.run.id") == run_id]
        return any(s.name == "saga.unwind.report" for s in ours) and all(s.parent_id in ids for s in ours)

    wait_for(exported, 30, "the run's and the unwind's spans and their parents")
    by_id = {s.span_id: s for s in read_dir(worker_spans)}

    def parent(span: Seen) -> Seen:
        assert span.parent_id is not None, span.name
        return by_id[span.parent_id]

    ours = mine()
    blocks = sorted((s for s in ours if s.name == "saga.run"), key=lambda s: s.start)
    assert [s.attributes["saga.run.entry"] for s in blocks] == ["saga", "saga", "saga"]
    first = blocks[0]
    assert first.links == []
    for later in blocks[1:]:  # each later forward task links into the run's first span
        assert later.links == [(*first.ids, {"saga.link.type": "continues"})]
    for block, name in zip(blocks, ("charge", "reserve", "notify"), strict=True):
        assert parent(block).name == f"run/traced.{name}"  # Celery's task span, the parent
    executes = {s.attributes["gen_ai.tool.name"]: s for s in ours if s.name.startswith("execute_tool ")}
    assert {n: parent(s).name for n, s in executes.items()} == {n: "saga.run" for n in executes}
    steps_seen = {s.attributes["gen_ai.tool.name"]: s for s in ours if s.name.startswith("saga.compensate ")}
    for name, step in steps_seen.items():  # the undo, linked to its effect, both on the worker
        assert [link[:2] for link in step.links] == [executes[name].ids], name


@pytest.fixture(scope="module", params=["start", "end"])
def broken_worker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, pg_database_url: str
) -> Iterator[Setup]:
    """A traced worker of its own (its own queue) whose span processor raises when a span starts or ends."""
    require("redis")
    url = REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}"
    tmp = tmp_path_factory.mktemp(f"broken-{request.param}")
    setup = make_setup(tmp, broker_url=url, result_backend=url, redis_url=url, journal_url=pg_database_url)
    env = {**setup.env(), "SAGA_TEST_SPANS": str(tmp), "SAGA_TEST_BROKEN_SPANS": request.param}
    worker = WorkerProcess(
        ["celery", "-A", "tests.tracing.traced_app:app", "worker"],
        env,
        tmp / "worker.log",
        concurrency=2,
        beat=False,
    )
    try:
        wait_for(worker.ready, 60, "the worker with a broken span processor to be ready")
        yield setup
    finally:
        worker.stop()


def test_forward_tasks_and_an_unwind_on_a_worker_whose_span_processor_raises_do_and_undo_each_effect_once(
    broken_worker: Setup, run_id: str
) -> None:
    ledger, client = broken_worker.ledger(), broken_worker.client()
    try:
        steps = [
            client.signature(f"traced.{name}", args=(run_id, {"n": i}), immutable=True)
            for i, name in enumerate(("charge", "reserve", "notify"))
        ]
        chain(*steps).apply_async().get(timeout=60)
        report = client.tasks[COMPENSATE_RUN].delay(run_id).get(timeout=60)
        again = client.tasks[COMPENSATE_RUN].delay(run_id).get(timeout=60)
        executed, undone = ledger.call_counts("execute"), ledger.call_counts("compensate")
    finally:
        client.close()
        ledger.close()
    assert [(e["tool_name"], e["status"]) for e in report["entries"]] == [
        ("notify", "compensated"),
        ("reserve", "compensated"),
        ("charge", "compensated"),
    ]
    assert {e["status"] for e in again["entries"]} == {"already-compensated"}
    mine = {f"{run_id}:{name}": 1 for name in ("charge", "reserve", "notify")}
    assert dict(executed) == mine
    assert dict(undone) == {f"{run_id}:comp:{name}": 1 for name in ("charge", "reserve", "notify")}
