"""The console's application: pages, API, /metrics and static files, behind the tokens.

``create_app`` refuses to build without tokens (nothing is served without configuration). Errors
answer as the caller speaks: JSON under ``/api``, a page elsewhere; a bad id or filter is a 400
that names it, an unknown run a 404, an action on a run in the wrong state a 409. In front of it
all, outermost first: the security headers (secure's ``SecureASGIMiddleware``), the trusted proxies' forwarded headers (uvicorn's
``ProxyHeadersMiddleware``), the allowed hosts (Starlette's ``TrustedHostMiddleware``), same-origin
POSTs (``security``), ``bodies.BodyLimit`` (a stranger's body holds a login, no more) and
``csrf.CsrfCheck`` (a POST a session cookie authenticates carries its CSRF token).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from secure.middleware import SecureASGIMiddleware
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Scope
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from ..celery import compensate_run
from ..celery.health import BeatCollector, fleet_health
from ..celery.sending import celery_enqueue, celery_workers
from ..core.redact import redact_text, redact_url
from ..errors import (
    ApprovalError,
    CompensatedRunError,
    InvalidInputError,
    JournalError,
    RunEndedError,
    SagaError,
    UnknownRunError,
)
from ..executor.context import WorkerContext
from ..observing import metrics
from ..operating import inbox as inbox_view
from ..operating.actions import ActionRefusedError, Enqueue, Workers
from ..settings import SagaSettings, get_settings
from . import api, bulk, pages
from .auth import Tokens
from .bodies import BodyLimit
from .csrf import CsrfCheck
from .security import (
    HEADERS,
    ForwardedHost,
    LoginLimiter,
    Network,
    SameOrigin,
    Sessions,
    Signer,
    console_secret,
)
from .service import (
    Console,
    Forbidden,
    NotAuthenticated,
    TooManyFailures,
    blocking,
    console_of,
    cookie_session,
    known_caller,
    principal,
)

log = logging.getLogger(__name__)


def _answer(
    request: Request, status: int, message: str, title: str, headers: dict[str, str] | None = None
) -> Response:
    message = redact_text(message)
    if request.url.path.startswith("/api/") or request.url.path == "/metrics":
        return JSONResponse({"error": message}, status_code=status, headers=headers)
    if status in (401, 429):
        return pages.login_page(request, status, headers, message)
    who = known_caller(request)
    return pages.render(request, "error.html", who, status, headers, title=title, message=message)


async def _too_many(request: Request, exc: Exception) -> Response:
    wait = exc.wait if isinstance(exc, TooManyFailures) else 60.0
    return _answer(request, 429, str(exc), "Log in", {"Retry-After": str(int(wait) + 1)})


async def _refuse(scope: Scope, status: int, message: str) -> ASGIApp:
    """The middlewares' refusal of a cross-site POST, a missing CSRF token or a body too large: the
    usual error answer. (A bad Host gets TrustedHostMiddleware's plain text: nothing of the console
    shows to a page that rebound a name to us.)"""
    return _answer(Request(scope), status, message, "Too large" if status == 413 else "Not allowed")


async def _not_authenticated(request: Request, exc: Exception) -> Response:
    return _answer(request, 401, "a token is required (Authorization: Bearer <token>, or log in)", "Log in")


async def _forbidden(request: Request, exc: Exception) -> Response:
    return _answer(request, 403, str(exc), "Not allowed")


async def _saga_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, UnknownRunError):
        return _answer(request, 404, str(exc), "No such run")
    # A run that has ended refuses a well-formed request by its state: a conflict, as a condemned run's.
    if isinstance(exc, InvalidInputError) and not isinstance(exc, RunEndedError):
        return _answer(request, 400, str(exc), "Bad request")
    if isinstance(exc, ActionRefusedError | CompensatedRunError | ApprovalError | RunEndedError):
        return _answer(request, 409, str(exc), "Not now")
    log.warning("console: %s", redact_text(str(exc)))
    return _answer(request, 500, str(exc), "Error")


# The console runs no unwind: its own counters would read 0 for everything the workers did.
WORKER_FIGURES = (
    "# saga-worker console: this page counts the runs waiting for a person (saga_runs_needing_attention).\n"
    "# The unwind counters (saga_unwinds_*, saga_compensation_steps_*, saga_compensate_hook_seconds, ...)\n"
    "# are the workers': scrape each `saga-worker worker` at SAGA_METRICS_PORT/metrics (served here only\n"
    "# when the console shares the workers' PROMETHEUS_MULTIPROC_DIR).\n"
)


def _metrics_registry(console: Console) -> CollectorRegistry:
    merged = CollectorRegistry()
    if metrics.multiprocess_dir() is not None:  # on the workers' host, sharing their counts folder
        merged.register(_Forward(metrics.registry()))
    if console.beat_metrics:
        merged.register(BeatCollector(compensate_run.app, console.settings))
    merged.register(
        metrics.AttentionCollector(
            lambda: inbox_view.inbox(
                console.journal,
                console.context.tools_if_configured,
                secret_keys=console.settings.secret_keys(),
            )
        )
    )
    return merged


class _Forward(Collector):
    """A registry's metrics as one collector of another (the process's or the workers' counters,
    next to the console's own gauge)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()

    def describe(self) -> Iterable[Metric]:
        return []


async def metrics_endpoint(request: Request) -> Response:
    principal(request)
    registry: CollectorRegistry = request.app.state.metrics
    body = await blocking(generate_latest, registry)
    return Response(WORKER_FIGURES.encode() + body, media_type=CONTENT_TYPE_LATEST)


def _lifespan(console: Console) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            console.context.close()

    return lifespan


def _existing_journal(settings: SagaSettings) -> WorkerContext:
    """The console reads a journal that exists, opened now: a mistyped path or URL is an error at start
    naming it, never an empty journal made on the spot that shows "no runs"."""
    context = WorkerContext(settings, create_journal=False)
    try:
        context.journal  # noqa: B018 - opened for its check
    except JournalError as exc:
        raise JournalError(
            f"{exc}. The console never creates a journal: create or migrate it with "
            "`saga-worker db upgrade` (same SAGA_JOURNAL_URL), or point SAGA_JOURNAL_URL at the workers' journal",
            url=redact_url(settings.resolved_journal_url()),
        ) from exc
    return context


def _give_health(console: Console, health: Callable[[], dict[str, Any] | None] | None) -> None:
    """The header's fleet: ``health`` if given, else the deployment's own (its broker, its workers,
    its result backend, whose last sweep /metrics reads too)."""
    console.health = health
    if health is None:
        alive, settings = console.workers, console.settings
        console.health = lambda: fleet_health(compensate_run.app, settings, alive)
        console.beat_metrics = True


def _signer(settings: SagaSettings) -> Signer:
    """What signs the console's session cookies: ``SAGA_CONSOLE_SECRET``, or one made for this process."""
    key = settings.console_secret.get_secret_value() if settings.console_secret else None
    return Signer(console_secret(key, embedded=settings.embedded))


def create_app(
    settings: SagaSettings | None = None,
    *,
    context: WorkerContext | None = None,
    enqueue: Enqueue | None = None,
    workers: Workers | None = None,
    health: Callable[[], dict[str, Any] | None] | None = None,
) -> Starlette:
    """The console for ``settings`` (default: the environment's). Raises ConsoleConfigError without
    tokens. ``enqueue`` defaults to the Celery task ``saga.compensate_run``, ``workers`` (who
    consumes the queue) to a Celery ping."""
    settings = settings if settings is not None else get_settings()
    secret = settings.console_tokens.get_secret_value() if settings.console_tokens else None
    signer = _signer(settings)
    network = Network.configure(
        allowed_hosts=settings.console_allowed_hosts,
        bind_host=settings.console_host,
        trusted_proxies=settings.console_trusted_proxies,
    )
    console = Console(
        settings=settings,
        tokens=Tokens(secret),
        context=context if context is not None else _existing_journal(settings),
        enqueue=enqueue if enqueue is not None else celery_enqueue(compensate_run),
        sessions=Sessions(settings.console_session_ttl, signer),
        signer=signer,
        limiter=LoginLimiter(settings.console_login_attempts),
        network=network,
        workers=workers if workers is not None else celery_workers(compensate_run, settings.queue),
    )
    _give_health(console, health)
    app = Starlette(
        routes=[
            *pages.routes,
            *api.routes,
            *bulk.routes,
            Route("/metrics", metrics_endpoint),
            Mount("/static", StaticFiles(directory=str(Path(__file__).with_name("static"))), name="static"),
        ],
        exception_handlers={
            NotAuthenticated: _not_authenticated,
            Forbidden: _forbidden,
            TooManyFailures: _too_many,
            SagaError: _saga_error,
        },
        lifespan=_lifespan(console),
        middleware=[
            Middleware(SecureASGIMiddleware, secure=HEADERS),
            Middleware(ForwardedHost, network=network),
            Middleware(ProxyHeadersMiddleware, trusted_hosts=network.proxies_spec),
            Middleware(TrustedHostMiddleware, allowed_hosts=list(network.allowed_hosts), www_redirect=False),
            Middleware(SameOrigin, refuse=_refuse),
            Middleware(BodyLimit, known=lambda request: known_caller(request) is not None, refuse=_refuse),
            Middleware(CsrfCheck, session_of=cookie_session, refuse=_refuse),
        ],
    )
    app.state.console = console
    app.state.metrics = _metrics_registry(console)
    return app


__all__ = ["console_of", "create_app"]
