"""The Django admin's pages for saga-worker (registered when ``django.contrib.admin`` is installed
with this app): the runs, filtered and searched, and each run's calls, unwinds, pending decisions and
audit trail, read-only, through :mod:`saga_worker.operating.views` as the console reads them. Its actions go
through :mod:`saga_worker.operating.actions` as the console's do: compensate (a dry run first, then confirmed
with a reason), re-drive, approve or deny a suspended call or a gated compensation, each with a
reason, each checked against the Django user's permissions and written to the audit trail with the
user's name as its actor (via ``console``: the admin is an operator's console)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import connections, transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from ... import executor
from ...celery import compensate_run
from ...celery.sending import celery_enqueue
from ...errors import SagaError
from ...journal.records import RunQuery, RunStatus, UnwindState, contains_words
from ...operating import actions, views
from ...operating import inbox as inbox_view
from ...settings import get_settings
from . import journal
from .models import Run

VIEW, COMPENSATE, DECIDE = "saga_worker.view_run", "saga_worker.compensate_run", "saga_worker.decide"
# The filters' choices: the journal's own, and `suspended` (a running run a call of which waits).
STATUSES = [RunStatus.RUNNING.value, views.SUSPENDED] + [
    s.value for s in RunStatus if s is not RunStatus.RUNNING
]
UNWIND_STATES = [s.value for s in UnwindState]


def _tools() -> dict[str, Any]:
    """The tools, when configured: which compensations wait for a person is asked of them."""
    try:
        return dict(executor.current().require_tools("the admin"))
    except SagaError:
        return {}


def _needing_a_person(query: RunQuery) -> list[dict[str, Any]]:
    """The runs the inbox lists (a call or a compensation waiting for a decision, an unwind given up
    on, a call left uncertain) that match the other filters, newest first: one page, as the inbox is
    bounded."""
    box = inbox_view.inbox(journal(), _tools())
    readings = inbox_view.run_readings(journal())  # suspended or interrupted, as the console reads them
    found = [journal().get_run(run_id) for run_id in sorted({i["run_id"] for i in box["items"]})]
    runs = [views.run_summary(r, readings.get(r.run_id)) for r in found if r is not None]
    if isinstance(query, views.ListingQuery) and query.suspended:
        status: str | None = views.SUSPENDED
    else:
        status = None if query.status is None else query.status.value
    return sorted(
        (
            r
            for r in runs
            if (status is None or r["status"] == status)
            and (query.unwind_state is None or r["unwind_state"] == query.unwind_state.value)
            and (query.contains is None or contains_words(r["run_id"], query.contains))
        ),
        key=lambda r: (r["updated_at"], r["run_id"]),
        reverse=True,
    )


class RunAdmin(admin.ModelAdmin):  # type: ignore[misc]
    """Not a model's pages: the journal's runs, read through the views the console uses."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.has_perm(VIEW))

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view

        def act(view: Any) -> Any:
            return _outside_atomic_requests(wrap(view))

        return [
            path("", wrap(self.runs_view), name="saga_worker_run_changelist"),
            path("<str:run_id>/", wrap(self.run_view), name="saga_worker_run_change"),
            path("<str:run_id>/compensate/", act(self.compensate_view), name="saga_worker_run_compensate"),
            path("<str:run_id>/redrive/", act(self.redrive_view), name="saga_worker_run_redrive"),
            path("<str:run_id>/decide/", act(self.decide_view), name="saga_worker_run_decide"),
        ]

    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "can_compensate": request.user.has_perm(COMPENSATE),
            "can_decide": request.user.has_perm(DECIDE),
            **extra,
        }

    def _require(self, request: HttpRequest, permission: str) -> None:
        if not request.user.has_perm(permission):
            raise PermissionDenied(f"{permission} is needed")

    # -- reading ---------------------------------------------------------------------------------

    def runs_view(self, request: HttpRequest) -> HttpResponse:
        self._require(request, VIEW)
        got = request.GET
        person = got.get("person") == "yes"
        try:
            query = views.parse_run_query(
                status=got.get("status") or None,
                unwind=got.get("unwind") or None,
                search=got.get("q") or None,
                cursor=got.get("cursor") or None,
            )
            if person:
                runs, next_cursor = _needing_a_person(query), None
            else:
                page = views.runs_page(journal(), query)
                readings = inbox_view.run_readings(journal())
                runs = [views.run_summary(r, readings.get(r.run_id)) for r in page.runs]
                next_cursor = page.next_cursor
        except SagaError as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(reverse("admin:saga_worker_run_changelist"))
        here = {k: v for k, v in got.items() if k != "cursor"}

        def link(**change: str) -> str:
            merged = {k: v for k, v in {**here, **change}.items() if v}
            return "?" + urlencode(sorted(merged.items()))

        filters = [
            ("status", "By status", STATUSES),
            ("unwind", "By unwind state", UNWIND_STATES),
            ("person", "Needs a person", ["yes"]),
        ]
        return TemplateResponse(
            request,
            "saga_worker/admin/runs.html",
            self._context(
                request,
                "Runs",
                runs=runs,
                search=got.get("q", ""),
                filters=[
                    {
                        "title": title,
                        "choices": [
                            {"label": "All", "url": link(**{name: ""}), "selected": not got.get(name)}
                        ]
                        + [
                            {"label": v, "url": link(**{name: v}), "selected": got.get(name) == v}
                            for v in values
                        ],
                    }
                    for name, title, values in filters
                ],
                next_url=link(cursor=next_cursor) if next_cursor else None,
            ),
        )

    def run_view(self, request: HttpRequest, run_id: str, plan: Any = None) -> HttpResponse:
        self._require(request, VIEW)
        try:
            view = views.run_view(journal(), run_id, _tools())
        except SagaError as exc:
            raise Http404(str(exc)) from exc
        if view is None:
            raise Http404(f"no run {run_id!r} in the journal")
        return TemplateResponse(
            request,
            "saga_worker/admin/run.html",
            self._context(request, f"Run {run_id}", view=view, run=view["run"], plan=plan),
        )

    # -- acting ----------------------------------------------------------------------------------

    def _actor(self, request: HttpRequest) -> str:
        return str(request.user.get_username())

    def _back(self, run_id: str) -> HttpResponseRedirect:
        return HttpResponseRedirect(reverse("admin:saga_worker_run_change", args=[run_id]))

    @staticmethod
    def _reason(request: HttpRequest) -> str:
        return " ".join(str(request.POST.get("reason", "")).split())

    def compensate_view(self, request: HttpRequest, run_id: str) -> HttpResponse:
        """The dry run first (``plan``: what an unwind would do now, nothing written); then, with
        ``confirm`` and a reason, the unwind is queued on the workers."""
        return _post_only(request) or self._compensate(request, run_id)

    def _compensate(self, request: HttpRequest, run_id: str) -> HttpResponse:
        self._require(request, COMPENSATE)
        try:
            if not request.POST.get("confirm"):
                report = actions.plan(run_id, context=executor.current())
                return self.run_view(request, run_id, plan=report.model_dump(mode="json"))
            reason = self._reason(request)
            task_id = actions.request_unwind(
                run_id,
                journal=journal(),
                enqueue=celery_enqueue(compensate_run),
                actor=self._actor(request),
                reason=reason,
                via="console",
            )
            messages.success(request, f"Unwind of {run_id} queued as task {task_id}: {reason}")
        except SagaError as exc:
            messages.error(request, str(exc))
        return self._back(run_id)

    def redrive_view(self, request: HttpRequest, run_id: str) -> HttpResponse:
        return _post_only(request) or self._redrive(request, run_id)

    def _redrive(self, request: HttpRequest, run_id: str) -> HttpResponse:
        self._require(request, COMPENSATE)
        try:
            task_id = actions.redrive(
                run_id,
                journal=journal(),
                enqueue=celery_enqueue(compensate_run),
                actor=self._actor(request),
                claim_ttl=get_settings().claim_ttl,
                via="console",
                reason=self._reason(request) or None,
            )
            messages.success(request, f"Unwind of {run_id} re-driven as task {task_id}")
        except SagaError as exc:
            messages.error(request, str(exc))
        return self._back(run_id)

    def decide_view(self, request: HttpRequest, run_id: str) -> HttpResponse:
        return _post_only(request) or self._decide(request, run_id)

    def _decide(self, request: HttpRequest, run_id: str) -> HttpResponse:
        self._require(request, DECIDE)
        decision, target = str(request.POST.get("decision", "")), str(request.POST.get("target", ""))
        try:
            actions.decide(
                decision,
                run_id,
                target,
                journal=journal(),
                actor=self._actor(request),
                reason=self._reason(request),
                via="console",
            )
            messages.success(request, f"{decision} of {target} in {run_id}: recorded")
        except SagaError as exc:
            messages.error(request, str(exc))
        return self._back(run_id)


def _outside_atomic_requests(view: Any) -> Any:
    """``view`` never wrapped in the request's transaction (``ATOMIC_REQUESTS``), on any database: an
    action writes the journal, whose unwind must commit on its own (on SQLite the journal would join
    the request's transaction, and refuse the unwind an eager Celery runs in it: docs/guides/django.md)."""
    for alias in connections:
        view = transaction.non_atomic_requests(using=alias)(view)
    return view


def _post_only(request: HttpRequest) -> HttpResponse | None:
    """None for a POST (an action changes the journal: never on a GET), else a 405."""
    return None if request.method == "POST" else HttpResponseNotAllowed(["POST"])


admin.site.register(Run, RunAdmin)
