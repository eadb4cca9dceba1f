"""What the console's pages and API share: the journal, the plan's context, the enqueue, the tokens,
and the request plumbing (who is asking, may they act, the ids in the path)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from ..actions import Enqueue
from ..errors import InvalidInputError
from ..executor.context import WorkerContext
from ..journal.base import Journal
from ..keys import check_run_id
from ..settings import SagaSettings
from .auth import COOKIE, Principal, Tokens

T = TypeVar("T")


class NotAuthenticated(Exception):
    """No token, or one the console does not know: 401."""


class Forbidden(Exception):
    """A viewer tried to act, or a form came without its CSRF token: 403."""


@dataclass
class Console:
    settings: SagaSettings
    tokens: Tokens
    context: WorkerContext  # the journal, tools and lock, as a worker opens them (dry runs run here)
    enqueue: Enqueue

    @property
    def journal(self) -> Journal:
        return self.context.journal


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def principal(request: Request) -> Principal:
    """The caller, from ``Authorization: Bearer`` or the login cookie; 401 otherwise."""
    found = console_of(request).tokens.who(bearer(request) or request.cookies.get(COOKIE))
    if found is None:
        raise NotAuthenticated()
    return found


def operator(request: Request, form: Any = None) -> Principal:
    """The caller, who must be an operator; a browser (cookie) must also send the form's CSRF token."""
    who = principal(request)
    if not who.can_act:
        raise Forbidden(f"{who.name} is a viewer: only an operator can do this")
    if bearer(request) is None:  # the browser: the cookie came by itself, the CSRF token cannot
        given = (form.get("csrf") if form is not None else None) or request.headers.get("x-csrf-token")
        if not who.csrf_ok(given if isinstance(given, str) else None):
            raise Forbidden("the form's CSRF token is missing or wrong: reload the page and try again")
    return who


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
