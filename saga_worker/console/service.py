"""What the console's pages and API share: the journal, the plan's context, the enqueue, the tokens,
the sessions, and the request plumbing (who is asking, may they act, the ids in the path)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from ..core.checks import check_run_id
from ..errors import InvalidInputError
from ..executor.context import WorkerContext
from ..journal.roles import OperatorJournal
from ..operating import actions
from ..operating.actions import ActionRefusedError, Enqueue, Workers
from ..settings import SagaSettings
from .auth import COOKIE, Principal, Tokens
from .security import LoginLimiter, Network, Session, Sessions, Signer

T = TypeVar("T")
log = logging.getLogger(__name__)


class NotAuthenticated(Exception):
    """No token, or one the console does not know: 401."""


class Forbidden(Exception):
    """A viewer tried to act, or a form came without its CSRF token: 403."""


class TooManyFailures(Exception):
    """Too many failed logins lately, from the client's address or with the token it presents: 429,
    with the seconds to wait."""

    def __init__(self, wait: float) -> None:
        super().__init__(
            f"too many failed logins from your address or with this token: try again in {int(wait) + 1} s"
        )
        self.wait = wait


@dataclass
class Console:
    settings: SagaSettings
    tokens: Tokens
    context: WorkerContext  # the journal, tools and lock, as a worker opens them (dry runs run here)
    enqueue: Enqueue
    sessions: Sessions
    limiter: LoginLimiter
    network: Network
    workers: Workers  # who consumes the queue (a ping), None: the broker cannot tell
    signer: Signer  # SAGA_CONSOLE_SECRET's: session cookies and the notices a redirect carries
    # The fleet's health (workers, queue depth, beat's last sweep: celery/health.py); None: not shown.
    health: Callable[[], dict[str, Any] | None] | None = None
    beat_metrics: bool = False  # /metrics reads beat's last sweep from the workers' result backend

    @property
    def journal(self) -> OperatorJournal:
        """The worker context's journal as the pages, the API and the actions read and act on it."""
        return self.context.journal


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def client_of(request: Request) -> str:
    return console_of(request).network.client(request.scope)


def check_token(request: Request, token: str | None, how: str) -> Principal | None:
    """The principal of a presented token. A valid token is always accepted; a wrong one is logged
    and counted against the client's address and against itself, and past the limit on either it is
    answered TooManyFailures instead of None."""
    console = console_of(request)
    who = console.tokens.who(token)
    if who is not None:
        return who
    client = client_of(request)
    credential = token or ""
    wait = console.limiter.wait(client, credential)
    console.limiter.failed(client, credential)
    log.warning("console: failed login (%s) from %s", how, client)
    if wait > 0:
        raise TooManyFailures(wait)
    return None


def session_of(request: Request) -> Session | None:
    """The browser's live session (from its cookie), if any."""
    console = console_of(request)
    return console.sessions.get(request.cookies.get(COOKIE), console.tokens.by_digest)


def principal(request: Request) -> Principal:
    """The caller, from ``Authorization: Bearer`` or the session cookie; 401 otherwise."""
    token = bearer(request)
    if token is not None:
        found = check_token(request, token, "bearer token")
        if found is None:
            raise NotAuthenticated()
        return found
    session = session_of(request)
    if session is None:
        raise NotAuthenticated()
    request.state.session = session
    return session.principal


def known_caller(request: Request) -> Principal | None:
    """The caller if it is known, without counting a failure (for error pages)."""
    token = bearer(request)
    if token is not None:
        return console_of(request).tokens.who(token)
    session = session_of(request)
    return None if session is None else session.principal


def operator(request: Request) -> Principal:
    """The caller, who must be an operator (a browser's CSRF token is checked before any handler:
    ``csrf.CsrfCheck``)."""
    who = principal(request)
    if not who.can_act:
        raise Forbidden(f"{who.name} is a viewer: only an operator can do this")
    return who


def cookie_session(request: Request) -> Session | None:
    """The live session that authenticates this request, if its cookie does: None when it presents
    ``Authorization: Bearer`` (the header authenticates it) or has no live session."""
    return None if bearer(request) is not None else session_of(request)


def run_id_of(request: Request) -> str:
    """The run id in the path, checked (a malformed id is a 400, before the journal is asked)."""
    raw = request.path_params["run_id"]
    try:
        return check_run_id(raw)
    except InvalidInputError:
        raise InvalidInputError(f"{raw[:80]!r} is not a run id", run_id=raw[:80]) from None


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Journal and Celery calls block: run them off the event loop."""
    return await run_in_threadpool(fn, *args, **kwargs)


def request_unwind(
    console: Console, run_id: str, actor: str, reason: str, *, parallel: bool = False
) -> dict[str, Any]:
    """Enqueue the run's unwind (``parallel``: each recorded group side by side), unless one queued
    earlier (by any console process) has not started (409: a second click must not queue a second
    unwind). The answer names the task and the workers alive."""
    try:
        task_id = actions.request_unwind(
            run_id,
            journal=console.journal,
            enqueue=console.enqueue,
            actor=actor,
            reason=reason,
            pending_for=console.settings.visibility_timeout,
            parallel=parallel,
        )
    except actions.UnwindQueuedError as exc:
        raise ActionRefusedError(
            run_id,
            "queue another unwind of",
            f"the unwind queued {int(exc.age)} s ago (task {exc.task_id}) has not started: "
            + workers_sentence(console.workers(), console.settings.queue),
        ) from None
    alive = console.workers()
    return {
        "task_id": task_id,
        "workers": alive,
        "workers_note": workers_sentence(alive, console.settings.queue),
    }


def workers_sentence(alive: list[str] | None, queue: str) -> str:
    if alive is None:
        return f"whether a worker consumes queue {queue!r} cannot be told from this broker"
    if not alive:
        return f"no worker consumes queue {queue!r} now: the unwind starts when one does"
    return f"{len(alive)} worker(s) consume queue {queue!r}: " + ", ".join(alive[:5])
