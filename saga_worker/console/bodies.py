"""How much of a request body the console reads: a stranger's no more than a login needs.

``BodyLimit`` sits in front of everything that reads a body (the CSRF check, the login form, the
API): a caller not yet known (no valid ``Authorization: Bearer``, no live session) may send what a
login form holds; a known one what an action holds. A body declared larger is refused (413) before a
byte of it is read; one that runs past the limit as it arrives (chunked) is refused when it does.

Hand-written: Starlette's ``RequestBodyLimitMiddleware`` takes one limit for every caller and answers
plain text, where test_a_body_larger_than_a_login_needs_is_refused_before_the_caller_is_known needs
the limit to depend on who asks and the API's 413 to be its JSON error.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .security import Refusal

# A token (at most 512 characters, url-encoded up to three bytes each) and a CSRF token, in a form.
LOGIN_BODY_MAX = 4 * 1024
# A known caller's action: a reason (at most 2,000 characters), a decision and a target, as a form or JSON.
BODY_MAX = 64 * 1024


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is larger than the {limit} bytes this console reads")
        self.limit = limit


class BodyLimit:
    """Caps every request's body: ``LOGIN_BODY_MAX`` until ``known`` says who is asking,
    ``BODY_MAX`` after."""

    def __init__(self, app: ASGIApp, *, known: Callable[[Request], bool], refuse: Refusal) -> None:
        self.app = app
        self.known = known
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        limit = BODY_MAX if self.known(request) else LOGIN_BODY_MAX
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await self._refuse(scope, receive, send, BodyTooLarge(limit))
            return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge as exc:
            if started:
                raise
            await self._refuse(scope, receive, send, exc)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, exc: BodyTooLarge) -> None:
        answer = await self.refuse(scope, 413, str(exc))
        await answer(scope, receive, send)
