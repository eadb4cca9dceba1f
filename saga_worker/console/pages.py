"""The console's server-rendered pages: the runs list, a run, its plan, and the forms that act.

Every page reads through ``saga_worker.operating.views`` (and ``.inbox``) and acts through ``saga_worker.operating.actions``, as the API
and the CLI do. The run page's live part (steps, claims, unwinds) is also served alone at
``/runs/{id}/live``; a few lines of vendored JavaScript poll it while an unwind is moving.
"""

from __future__ import annotations

import json
import re
import time
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from ..celery.task_ids import step_task_id
from ..core.display import neutral
from ..errors import InvalidInputError, UnknownRunError
from ..journal.records import AuditAction
from ..operating import actions, views
from ..operating import inbox as inbox_view
from ..operating.stuck import QUEUED_WINDOW_S, STUCK_REASONS
from ..operating.timeline import timeline
from .auth import COOKIE, Principal
from .security import journal_summary
from .service import (
    Console,
    Forbidden,
    TooManyFailures,
    blocking,
    check_token,
    console_of,
    cookie_session,
    operator,
    principal,
    request_unwind,
    run_id_of,
    workers_sentence,
)

# What happens after a decision, said on the page the operator comes back to.
NEXT_STEP = {
    "approve": "Approved {target}. It executes when your application resumes run {run_id} "
    "(resume_run): the console does not resume runs.",
    "deny": "Denied {target}. When your application resumes run {run_id}, its planner gets the call's "
    "error instead of a result.",
    "approve-compensation": "Approved undoing {target}. The beat sweeper re-drives the unwind of {run_id} "
    "at its next sweep and calls the hook; or compensate the run again now.",
    "deny-compensation": "Denied undoing {target}: it reads skipped-denied, and the unwind of {run_id} "
    "goes on past it at the sweeper's next sweep.",
    "redrive": "Re-drive of {run_id} queued on the workers.",
}
COUNTS_TTL_S = 1.0  # the header counts of a page load; the live fragment has none
_SUFFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,299}$")

templates = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))


def _shown(value: Any) -> Any:
    """Every value a page renders: text from the journal with its control and bidi characters shown
    as escapes (display.neutral), so a stored reason or actor cannot reorder or hide what a person
    reads; markup the templates build themselves (``Markup``) is left alone."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return neutral(value, lines=True)
    return value


templates.env.finalize = _shown

STATUS_CLASS = {
    "compensated": "ok",
    "already-compensated": "ok",
    "complete": "ok",
    "succeeded": "ok",
    "finished": "ok",
    "would-compensate": "info",
    "claimed": "info",
    "pending": "info",
    "running": "info",
    "skipped-no-hook": "warn",
    "skipped-not-executed": "warn",
    "skipped-denied": "warn",
    "incomplete": "stuck",  # halted or uncertain: not amber like a run that waits (suspended)
    "stuck": "stuck",
    "interrupted": "stuck",
    "queued": "stuck",
    "in progress": "info",
    "plan": "info",
    "suspended": "warn",
    "awaiting": "warn",
    "awaiting-approval": "warn",
    "uncertain": "odd",
    "busy": "bad",
    "failed": "bad",
    "attention": "bad",
    "denied": "bad",
    "not-attempted": "dim",
    "none": "dim",
}


def exact(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + "Z"


def relative(seconds: float) -> str:
    """``3 s``, ``4 min``, ``2 h 5 min``, ``3 d``: how long, to the unit an operator reads."""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{int(seconds)} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    if seconds < 86400:
        hours, minutes = divmod(int(seconds // 60), 60)
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{int(seconds // 86400)} d"


def _time(ts: float | None, now: float | None = None) -> Markup:
    """A moment as the page shows it: relative (``4 min ago``), the exact UTC time on hover."""
    if ts is None:
        return Markup("")
    ago = (time.time() if now is None else now) - ts
    text = f"{relative(ago)} ago" if ago >= 0 else f"in {relative(ago)}"
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
    return Markup('<time datetime="{}" title="{}">{}</time>').format(iso, exact(ts), text)


def _duration(start: float | None, end: float | None) -> str:
    if start is None or end is None:
        return ""
    took = max(0.0, end - start)
    return f"{took * 1000:.0f} ms" if took < 1 else (f"{took:.1f} s" if took < 60 else relative(took))


def _breakable(text: object) -> Markup:
    """A key that may wrap only after its ``:`` separators (and, as browsers do, its hyphens): never in
    the middle of a token."""
    return Markup(":<wbr>").join(escape(str(text)).split(":"))


templates.env.filters["breakable"] = _breakable
templates.env.filters["when"] = _time
templates.env.filters["ago"] = _time
templates.env.filters["exact"] = lambda ts: "" if ts is None else exact(ts)
templates.env.globals["duration"] = _duration
templates.env.globals["status_class"] = lambda s: STATUS_CLASS.get(str(s), "")


def render(
    request: Request,
    name: str,
    who: Principal | None,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> Response:
    """A page. Nothing of the configuration shows to a stranger; a known caller sees the journal's
    kind and host (never its user, password or database)."""
    console = console_of(request)
    session = getattr(request.state, "session", None) or (cookie_session(request) if who else None)
    return templates.TemplateResponse(
        request,
        name,
        {
            "who": who,
            "csrf": session.csrf if who is not None and session is not None else "",
            "journal": journal_summary(console.settings.resolved_journal_url()) if who is not None else "",
            "inbox_counts": getattr(request.state, "inbox_counts", None) if who is not None else None,
            "fleet": getattr(request.state, "fleet", None) if who is not None else None,
            "flower": (console.settings.flower_url or "").rstrip("/") if who is not None else "",
            **context,
        },
        status_code=status_code,
        headers=headers,
    )


async def inbox_counts(request: Request) -> None:
    """The header's counts of what waits for a person, read at most every few seconds."""
    console = console_of(request)
    cached = getattr(console, "_inbox_counts", None)
    now = time.monotonic()
    if cached is None or now - cached[0] > COUNTS_TTL_S:
        found = await blocking(
            inbox_view.inbox,
            console.journal,
            console.context.tools_if_configured,
            secret_keys=console.settings.secret_keys(),
        )
        cached = (now, {"total": found["total"], **found["counts"], "stuck": found["stuck"]["count"]})
        console._inbox_counts = cached  # type: ignore[attr-defined]
    request.state.inbox_counts = cached[1]
    request.state.fleet = await fleet(console)


FLEET_TTL_S = 5.0  # asking the workers takes up to a second: the header's fleet is read at most this often


async def fleet(console: Console) -> dict[str, Any] | None:
    """The header's fleet (workers, queue depth, beat's last sweep), read at most every few seconds."""
    if console.health is None:
        return None
    cached = getattr(console, "_fleet", None)
    now = time.monotonic()
    if cached is None or now - cached[0] > FLEET_TTL_S:
        cached = (now, await blocking(console.health))
        console._fleet = cached  # type: ignore[attr-defined]
    found: dict[str, Any] | None = cached[1]
    return found


NOTICE = "saga-console-notice"
NOTICE_TTL_S = 600.0


def notice(request: Request, done: str, target: str, run_id: str) -> str:
    """What the page a redirect lands on should say happened, signed with the console's secret: a link
    someone else made cannot show an operator a confirmation of something that did not happen."""
    data = {"d": done, "t": target[:300], "r": run_id[:200], "e": time.time() + NOTICE_TTL_S}
    return console_of(request).signer.sign(NOTICE, data)


def next_step(request: Request) -> str | None:
    data = console_of(request).signer.unsign(NOTICE, request.query_params.get("notice"))
    if data is None:
        return None
    template = NEXT_STEP.get(str(data.get("d", "")))
    if template is None:
        return None
    return template.format(target=str(data.get("t", "")), run_id=str(data.get("r", "")))


async def inbox_page(request: Request) -> Response:
    who = principal(request)
    console = console_of(request)
    limit = inbox_view.inbox_limit(request.query_params.get("limit"))
    found = await blocking(
        inbox_view.inbox,
        console.journal,
        console.context.tools_if_configured,
        secret_keys=console.settings.secret_keys(),
        limit=limit,
    )
    if limit == inbox_view.INBOX_LIMIT:  # the header counts what the default inbox lists, not a shorter page
        counts = {"total": found["total"], **found["counts"], "stuck": found["stuck"]["count"]}
        console._inbox_counts = (time.monotonic(), counts)  # type: ignore[attr-defined]
    await inbox_counts(request)
    return render(
        request,
        "inbox.html",
        who,
        inbox=found,
        kinds=inbox_view.INBOX_KINDS,
        reasons=STUCK_REASONS,
        done=next_step(request),
    )


async def journal_size(request: Request) -> dict[str, Any]:
    """How big the journal is and its oldest run (retention's measure), read at most once a minute:
    counting every run is not free on a large journal."""
    console = console_of(request)
    cached = getattr(console, "_journal_size", None)
    now = time.monotonic()
    if cached is None or now - cached[0] > SIZE_TTL_S:
        size = await blocking(console.journal.journal_size)
        cached = (now, views.size_summary(size))
        console._journal_size = cached  # type: ignore[attr-defined]
    return dict(cached[1])


SIZE_TTL_S = 60.0


async def runs_list(request: Request) -> Response:
    who = principal(request)
    q = request.query_params
    filters = {k: q.get(k, "") for k in ("status", "condemned", "unwind", "search")}
    query = views.parse_run_query(**filters, cursor=q.get("cursor"), limit=q.get("limit"))
    journal = console_of(request).journal
    page = await blocking(views.runs_page, journal, query)
    waiting = (
        await blocking(inbox_view.run_readings, journal)
        if any(r.status.value == "running" for r in page.runs)
        else {}
    )
    await inbox_counts(request)
    kept = {k: v for k, v in filters.items() if v}
    next_url = None
    if page.next_cursor:
        next_url = "/?" + urlencode({**kept, "cursor": page.next_cursor, "limit": query.limit})
    return render(
        request,
        "runs.html",
        who,
        runs=[views.run_summary(r, waiting.get(r.run_id)) for r in page.runs],
        filters=filters,
        next_url=next_url,
        first_url="/?" + urlencode(kept) if q.get("cursor") else None,
        size=await journal_size(request),
    )


async def _view(request: Request) -> tuple[str, dict[str, Any]]:
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
    view["timeline"] = timeline(view, step_task_id)
    return run_id, view


async def run_page(request: Request) -> Response:
    who = principal(request)
    run_id, view = await _view(request)
    console = console_of(request)
    queued = None
    task = request.query_params.get("task")
    # A request no worker has taken stays on the page (after a reload too) until one takes it.
    waiting = await blocking(actions.queued_unwind, console.journal, run_id, QUEUED_WINDOW_S)
    if waiting is not None and waiting.target is not None:
        task = waiting.target
    if task:  # only a request the journal holds: a link cannot make one up
        trail = await blocking(console.journal.read_audit, run_id)
        row = next((r for r in trail if r.action is AuditAction.UNWIND_QUEUED and r.target == task), None)
        if row is not None:
            alive = await blocking(console.workers)
            queued = {
                "task_id": task,
                "workers": alive,
                "note": workers_sentence(alive, console.settings.queue),
                "at": row.at,
                "started": waiting is None,
            }
    await inbox_counts(request)
    return render(
        request,
        "run.html",
        who,
        view=view,
        watch=request.query_params.get("watch") == "1",
        queued=queued,
        done=next_step(request),
    )


async def run_live(request: Request) -> Response:
    who = principal(request)
    _, view = await _view(request)
    response = render(request, "_live.html", who, view=view)
    response.headers["X-Saga-Moving"] = "1" if view["in_progress"] else "0"
    response.headers["Cache-Control"] = "no-store"
    return response


async def plan_page(request: Request) -> Response:
    who = principal(request)
    run_id, view = await _view(request)
    report = await blocking(actions.plan, run_id, context=console_of(request).context)
    await inbox_counts(request)
    return render(request, "plan.html", who, view=view, plan=report.model_dump(mode="json"))


async def compensate_form(request: Request) -> Response:
    who = operator(request)
    form = await request.form()
    run_id = run_id_of(request)
    console = console_of(request)
    reason = form.get("reason")
    queued = await blocking(
        partial(request_unwind, parallel=form.get("parallel") == "1"),
        console,
        run_id,
        who.name,
        reason if isinstance(reason, str) else "",
    )
    return RedirectResponse(
        f"/runs/{run_id}?" + urlencode({"watch": 1, "task": queued["task_id"]}), status_code=303
    )


async def redrive_form(request: Request) -> Response:
    who = operator(request)
    run_id = run_id_of(request)
    console = console_of(request)
    await blocking(
        actions.redrive,
        run_id,
        journal=console.journal,
        enqueue=console.enqueue,
        actor=who.name,
        claim_ttl=console.settings.claim_ttl,
    )
    return RedirectResponse(
        f"/runs/{run_id}?" + urlencode({"watch": 1, "notice": notice(request, "redrive", "", run_id)}),
        status_code=303,
    )


async def decide_form(request: Request) -> Response:
    """Approve or deny a suspended call or a gated compensation: the form's ``decision`` (approve,
    deny, approve-compensation, deny-compensation), ``target`` (call id or step) and ``reason``;
    the actor is the console user."""
    who = operator(request)
    form = await request.form()
    run_id = run_id_of(request)
    decision, target, reason = (form.get(k) for k in ("decision", "target", "reason"))
    if not isinstance(decision, str) or not isinstance(target, str) or not target:
        raise InvalidInputError("the form needs a decision and a target (a call id or a step)", run_id=run_id)
    reason = " ".join(reason.split()) if isinstance(reason, str) else ""
    if not reason:
        raise InvalidInputError("a decision needs a reason (it is recorded with your name)", run_id=run_id)
    if decision.startswith("deny") and form.get("confirm") != "yes":
        raise InvalidInputError("a denial needs its confirmation box ticked", run_id=run_id)
    await blocking(
        actions.decide,
        decision,
        run_id,
        target,
        journal=console_of(request).journal,
        actor=who.name,
        reason=reason,
        via="console",
    )
    done = urlencode({"notice": notice(request, decision, target, run_id)})
    if form.get("back") == "inbox":
        return RedirectResponse(f"/inbox?{done}", status_code=303)
    return RedirectResponse(f"/runs/{run_id}?watch=1&{done}", status_code=303)


def login_page(
    request: Request, status_code: int = 200, headers: dict[str, str] | None = None, error: str | None = None
) -> Response:
    """The login form; a browser that holds a live session gets its CSRF token in it (a POST its
    cookie authenticates carries one, a new login too)."""
    session = cookie_session(request)
    csrf = session.csrf if session is not None else ""
    return render(request, "login.html", None, status_code, headers, error=error, login_csrf=csrf)


async def login(request: Request) -> Response:
    """A known token opens a session: a signed cookie (the token's digest, never the token)."""
    if request.method == "GET":
        return login_page(request)
    form = await request.form()
    token = form.get("token")
    try:
        who = check_token(request, token if isinstance(token, str) else None, "login form")
    except TooManyFailures as exc:
        return login_page(request, 429, {"Retry-After": str(int(exc.wait) + 1)}, str(exc))
    if who is None:
        return login_page(request, 401, error="That token is not known here.")
    console = console_of(request)
    console.sessions.close(request.cookies.get(COOKIE))  # a new login never reuses an old session
    session_id, _ = console.sessions.open(who)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        COOKIE,
        session_id,
        httponly=True,
        samesite="strict",
        secure=console.network.is_https(request.scope),
        max_age=int(console.sessions.ttl),
    )
    return response


async def logout(request: Request) -> Response:
    """Clears the browser's cookie and revokes its session in this process (see ``Sessions``)."""
    console_of(request).sessions.close(request.cookies.get(COOKIE))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, httponly=True, samesite="strict")
    return response


def forbidden_page(request: Request, exc: Forbidden) -> Response:
    return render(request, "error.html", None, status_code=403, title="Not allowed", message=str(exc))


def _download(data: dict[str, Any], filename: str) -> Response:
    body = json.dumps(data, indent=2, sort_keys=True, default=repr)
    return Response(
        body,
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


def suffix_of(request: Request) -> str:
    raw = request.path_params["suffix"]
    if not _SUFFIX.match(raw):
        raise InvalidInputError(f"{raw[:80]!r} is not a step", suffix=raw[:80])
    return str(raw)


async def call_json(request: Request) -> Response:
    """A call's input, output and error, whole (secrets hidden by key name), as a download."""
    principal(request)
    run_id, suffix = run_id_of(request), suffix_of(request)
    console = console_of(request)
    found = await blocking(views.call_values, console.journal, run_id, suffix, console.settings.secret_keys())
    if found is None:
        raise UnknownRunError(run_id)
    return _download(found, f"{run_id}-{suffix}.json")


async def run_json(request: Request) -> Response:
    """The run's prompt, text, error and planner decisions, whole, as a download."""
    principal(request)
    run_id = run_id_of(request)
    console = console_of(request)
    found = await blocking(views.run_values, console.journal, run_id, console.settings.secret_keys())
    if found is None:
        raise UnknownRunError(run_id)
    return _download(found, f"{run_id}.json")


async def healthz(request: Request) -> Response:
    return HTMLResponse("ok")


routes = [
    Route("/", runs_list),
    Route("/login", login, methods=["GET", "POST"]),
    Route("/logout", logout, methods=["POST"]),
    Route("/healthz", healthz),
    Route("/inbox", inbox_page),
    Route("/runs/{run_id:str}", run_page),
    Route("/runs/{run_id:str}/live", run_live),
    Route("/runs/{run_id:str}/run.json", run_json),
    Route("/runs/{run_id:str}/calls/{suffix:str}.json", call_json),
    Route("/runs/{run_id:str}/plan", plan_page, methods=["POST"]),
    Route("/runs/{run_id:str}/compensate", compensate_form, methods=["POST"]),
    Route("/runs/{run_id:str}/redrive", redrive_form, methods=["POST"]),
    Route("/runs/{run_id:str}/decide", decide_form, methods=["POST"]),
]
