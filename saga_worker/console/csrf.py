"""Every request that changes something and that a browser's session cookie authenticates carries
that session's CSRF token: a form's ``csrf`` field or an ``X-CSRF-Token`` header.

A check in front of the routes, not in each handler, so a route added later cannot skip it
(tests/console/test_security.py walks every route to prove it). A request that presents
``Authorization: Bearer`` is authenticated by that header, which no other site can make a browser
send, and needs none; one without a live session has nothing to forge (it is refused, or logs in,
on its own merits). The body it reads is already capped (``bodies.BodyLimit``, in front of it).

Hand-written: starlette-csrf reads the token from a header only (the console's forms work without
script: test_every_post_route_refuses_a_cookie_session_without_its_csrf_token posts it as a form
field), and asgi-csrf's double-submit cookie outlives the login session, so a token seen before a
logout still passes after the next login
(test_a_new_login_gets_a_new_csrf_token_and_the_old_one_is_refused); here the token is the
session's own secret, signed inside its cookie.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .security import UNSAFE_METHODS, Refusal, Session

FIELD = "csrf"
HEADER = "x-csrf-token"
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


class CsrfCheck:
    """Refuses (403) an unsafe request authenticated by a live session without that session's token.
    ``session_of`` is the request's live session, None when it has none or presents a Bearer token."""

    def __init__(
        self, app: ASGIApp, *, session_of: Callable[[Request], Session | None], refuse: Refusal
    ) -> None:
        self.app = app
        self.session_of = session_of
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in UNSAFE_METHODS:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        session = self.session_of(request)
        if session is None:
            await self.app(scope, receive, send)
            return
        given = request.headers.get(HEADER)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if given is None and content_type in FORMS:
            body = await Request(scope, receive).body()
            async with Request(scope, _replay(body, receive)).form() as form:
                field = form.get(FIELD)
                given = field if isinstance(field, str) else None
            receive = _replay(body, receive)
        if given is None or not hmac.compare_digest(given.encode(), session.csrf.encode()):
            answer = await self.refuse(
                scope, 403, "the form's CSRF token is missing or wrong: reload the page and try again"
            )
            await answer(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body already read, then whatever the connection says next (its disconnect)."""
    pending = True

    async def replayed() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
