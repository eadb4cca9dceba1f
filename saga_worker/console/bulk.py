"""The console's bulk actions on a filtered runs list (``operating/bulk.py``): a review page that
says what each run would get and how many, then the action after a confirmation naming that count.

The count is the confirmation: the second request plans again, and acts only if the plan still
holds exactly that many runs (the selection moved meanwhile: the review is shown again, nothing
done). Operators only; the CSRF check is the console's own, before any handler."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import InvalidInputError
from ..operating import actions
from ..operating.bulk import BULK_ACTIONS, Filters, Target, plan_bulk, run_bulk
from .pages import inbox_counts, render
from .service import Console, blocking, console_of, operator

FIELDS = ("status", "unwind", "condemned", "search", "tool", "older_than")
WHAT = {
    "compensate": "condemn and compensate (queued on the workers)",
    "redrive": "re-drive the unwind (flagged for attention)",
    "approve-compensation": "approve every gated compensation awaiting a decision",
}


def _filters(form: FormData) -> tuple[str, Filters, dict[str, str]]:
    action = form.get("action")
    if action not in BULK_ACTIONS:
        raise InvalidInputError(f"unknown bulk action {action!r}; one of {', '.join(BULK_ACTIONS)}")
    given = {k: v for k in FIELDS if isinstance(v := form.get(k), str) and v.strip()}
    if given.get("status") == "suspended":
        raise InvalidInputError("a bulk action cannot select by 'suspended': use the inbox for those")
    filters = Filters.checked(
        status=given.get("status"),
        unwind=given.get("unwind"),
        condemned=given.get("condemned"),
        contains=given.get("search"),
        tool=given.get("tool"),
        older_than=given.get("older_than"),
    )
    return str(action), filters, given


def _act(console: Console, action: str, actor: str, reason: str) -> Callable[[Target], Any]:
    journal = console.journal
    if action == "compensate":
        return lambda t: {
            "task_id": actions.request_unwind(
                t.run_id, journal=journal, enqueue=console.enqueue, actor=actor, reason=reason,
                pending_for=console.settings.visibility_timeout,
            )
        }  # fmt: skip
    if action == "redrive":
        return lambda t: {
            "task_id": actions.redrive(
                t.run_id,
                journal=journal,
                enqueue=console.enqueue,
                actor=actor,
                claim_ttl=console.settings.claim_ttl,
            )
        }

    def approved(t: Target) -> Any:
        for suffix in t.steps:
            actions.decide(
                "approve-compensation",
                t.run_id,
                suffix,
                journal=journal,
                actor=actor,
                reason=reason,
                via="console",
            )
        return {"approved": list(t.steps)}

    return approved


async def bulk_review(request: Request) -> Response:
    who = operator(request)
    action, filters, given = _filters(await request.form())
    return await _review(request, who, action, filters, given)


async def _review(
    request: Request, who: Any, action: str, filters: Filters, given: Mapping[str, str], **extra: Any
) -> Response:
    console = console_of(request)
    plan = await blocking(_plan, console, action, filters)
    await inbox_counts(request)
    return render(
        request, "bulk.html", who, action=action, what=WHAT[action], plan=plan, given=given, **extra
    )


def _plan(console: Console, action: str, filters: Filters) -> Any:
    return plan_bulk(
        action, filters, console.journal, tools=console.context.tools_if_configured,
        pending_for=console.settings.visibility_timeout,
    )  # fmt: skip


async def bulk_confirm(request: Request) -> Response:
    who = operator(request)
    form = await request.form()
    action, filters, given = _filters(form)
    reason = " ".join(str(form.get("reason") or "").split())
    if not reason:
        raise InvalidInputError("a bulk action needs a reason (it is recorded with your name on each run)")
    console = console_of(request)
    plan = await blocking(_plan, console, action, filters)
    if str(len(plan.todo)) != form.get("count"):
        moved = (
            f"the selection changed since you reviewed it: {len(plan.todo)} runs now, not {form.get('count')}"
        )
        return await _review(request, who, action, filters, given, moved=moved)
    act = _act(console, action, who.name, reason)
    summary = await blocking(
        run_bulk, plan, console.journal, act, tools=console.context.tools_if_configured,
        pending_for=console.settings.visibility_timeout,
    )  # fmt: skip
    await inbox_counts(request)
    return render(
        request, "bulk.html", who, action=action, what=WHAT[action], plan=plan, given=given, summary=summary
    )


routes = [
    Route("/bulk", bulk_review, methods=["POST"]),
    Route("/bulk/confirm", bulk_confirm, methods=["POST"]),
]
