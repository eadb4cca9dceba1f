"""The console's JSON API: the same reads and actions as its pages (and as the CLI).

``GET /api/inbox`` (what waits for a person, across runs; ``limit`` of each kind), ``GET /api/runs`` (filters: status, condemned, unwind, search, cursor, limit), ``GET /api/runs/{id}``,
``POST /api/runs/{id}/plan`` (the dry run; any role), ``POST /api/runs/{id}/compensate``
(``{"reason": …}``; operator), ``POST /api/runs/{id}/redrive`` (operator), ``POST
/api/runs/{id}/decide`` (``{"decision": "approve" | "deny" | "approve-compensation" |
"deny-compensation", "target": call id or step, "reason": …}``; operator).
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..celery.task_ids import step_task_id
from ..errors import InvalidInputError, UnknownRunError
from ..journal.records import CompensationGate
from ..operating import actions, views
from ..operating import inbox as inbox_view
from ..operating.timeline import timeline
from .service import blocking, console_of, operator, principal, request_unwind, run_id_of


async def list_runs(request: Request) -> JSONResponse:
    principal(request)
    q = request.query_params
    query = views.parse_run_query(
        status=q.get("status"),
        condemned=q.get("condemned"),
        unwind=q.get("unwind"),
        search=q.get("search"),
        cursor=q.get("cursor"),
        limit=q.get("limit"),
    )
    journal = console_of(request).journal
    page = await blocking(views.runs_page, journal, query)
    waiting = (
        await blocking(inbox_view.run_readings, journal)
        if any(r.status.value == "running" for r in page.runs)
        else {}
    )
    summaries = [views.run_summary(r, waiting.get(r.run_id)) for r in page.runs]
    return JSONResponse({"runs": summaries, "next_cursor": page.next_cursor})


async def get_run(request: Request) -> JSONResponse:
    principal(request)
    run_id = run_id_of(request)
    console = console_of(request)
    view = await blocking(
        views.run_view,
        console.journal,
        run_id,
        console.context.tools_if_configured,
        secret_keys=console.settings.secret_keys(),
    )
    if view is None:
        raise UnknownRunError(run_id)
    view["timeline"] = timeline(view, step_task_id)  # the run page's story, for programs too
    return JSONResponse(view)


async def plan(request: Request) -> JSONResponse:
    principal(request)
    run_id = run_id_of(request)
    console = console_of(request)
    if await blocking(console.journal.get_run, run_id) is None:
        raise UnknownRunError(run_id)
    report = await blocking(actions.plan, run_id, context=console.context)
    return JSONResponse(report.model_dump(mode="json"))


MAX_DEPTH = 32  # a request is an object of strings: anything deeper is not one


def _nested_deeper_than(data: Any, limit: int) -> bool:
    """Whether lists and objects nest more than ``limit`` levels (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                return True
            stack.extend(
                (child, depth + 1) for child in (value.values() if isinstance(value, dict) else value)
            )
    return False


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()  # at most bodies.BODY_MAX: BodyLimit, in front of the routes, refuses more
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested too deeply to be a request (3.11, 3.12)
        raise InvalidInputError("the request body is not JSON (or is nested too deeply)") from None
    if _nested_deeper_than(
        data, MAX_DEPTH
    ):  # CPython 3.13's parser takes 5,000 levels without a RecursionError
        raise InvalidInputError("the request body is not JSON (or is nested too deeply)")
    if not isinstance(data, dict):
        raise InvalidInputError("the request body must be a JSON object")
    return data


async def compensate(request: Request) -> JSONResponse:
    who = operator(request)
    run_id = run_id_of(request)
    body = await _body(request)
    reason, parallel = body.get("reason"), body.get("parallel", False)
    if not isinstance(reason, str):
        raise InvalidInputError("a reason (a string) is required to compensate a run", run_id=run_id)
    if not isinstance(parallel, bool):
        raise InvalidInputError("parallel must be true or false", run_id=run_id)
    queued = await blocking(
        partial(request_unwind, parallel=parallel), console_of(request), run_id, who.name, reason
    )
    return JSONResponse({"run_id": run_id, "actor": who.name, **queued}, status_code=202)


async def redrive(request: Request) -> JSONResponse:
    who = operator(request)
    run_id = run_id_of(request)
    console = console_of(request)
    task_id = await blocking(
        actions.redrive,
        run_id,
        journal=console.journal,
        enqueue=console.enqueue,
        actor=who.name,
        claim_ttl=console.settings.claim_ttl,
    )
    return JSONResponse({"run_id": run_id, "task_id": task_id, "actor": who.name}, status_code=202)


async def decide(request: Request) -> JSONResponse:
    who = operator(request)
    run_id = run_id_of(request)
    body = await _body(request)
    decision, target, reason = body.get("decision"), body.get("target"), body.get("reason", "")
    if not isinstance(decision, str) or not isinstance(target, str) or not target:
        raise InvalidInputError("a decision and a target (strings) are required", run_id=run_id)
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInputError("a reason (a non-empty string) is required with a decision", run_id=run_id)
    outcome = await blocking(
        actions.decide,
        decision,
        run_id,
        target,
        journal=console_of(request).journal,
        actor=who.name,
        reason=reason,
        via="console",
    )
    state = outcome.decision if isinstance(outcome, CompensationGate) else outcome.status
    return JSONResponse(
        {"run_id": run_id, "decision": decision, "target": target, "state": state.value, "actor": who.name}
    )


async def inbox(request: Request) -> JSONResponse:
    """Everything waiting for a person, across runs, oldest first (``saga_worker.operating.inbox``)."""
    principal(request)
    console = console_of(request)
    found = await blocking(
        inbox_view.inbox,
        console.journal,
        console.context.tools_if_configured,
        secret_keys=console.settings.secret_keys(),
        limit=inbox_view.inbox_limit(request.query_params.get("limit")),
    )
    return JSONResponse(found)


async def health(request: Request) -> JSONResponse:
    """The fleet: workers consuming the saga queue, its depth, beat's last sweep and whether it is
    overdue (``saga_worker.celery.health``; ``saga-worker status --json`` answers the same)."""
    principal(request)
    console = console_of(request)
    found = None if console.health is None else await blocking(console.health)
    return JSONResponse(found)


async def call_values(request: Request) -> JSONResponse:
    """A call's input, output and error, whole (secrets hidden by key name)."""
    principal(request)
    from .pages import suffix_of

    run_id, suffix = run_id_of(request), suffix_of(request)
    console = console_of(request)
    found = await blocking(views.call_values, console.journal, run_id, suffix, console.settings.secret_keys())
    if found is None:
        raise UnknownRunError(run_id)
    return JSONResponse(found)


async def run_values(request: Request) -> JSONResponse:
    """The run's prompt, text, error and planner decisions, whole."""
    principal(request)
    run_id = run_id_of(request)
    console = console_of(request)
    found = await blocking(views.run_values, console.journal, run_id, console.settings.secret_keys())
    if found is None:
        raise UnknownRunError(run_id)
    return JSONResponse(found)


routes = [
    Route("/api/inbox", inbox),
    Route("/api/health", health),
    Route("/api/runs/{run_id:str}/values", run_values),
    Route("/api/runs/{run_id:str}/calls/{suffix:str}", call_values),
    Route("/api/runs", list_runs),
    Route("/api/runs/{run_id:str}", get_run),
    Route("/api/runs/{run_id:str}/plan", plan, methods=["POST"]),
    Route("/api/runs/{run_id:str}/compensate", compensate, methods=["POST"]),
    Route("/api/runs/{run_id:str}/redrive", redrive, methods=["POST"]),
    Route("/api/runs/{run_id:str}/decide", decide, methods=["POST"]),
]
