"""The one place secrets are hidden before text leaves the process.

Everything we print, log, store or expose goes through here: the CLI's one-line errors and its
console output, the worker's log lines about saga-worker (a filter on every handler that leaves the
host app's own records alone), the exceptions a task stores in
the result backend, the web console, the Celery conf a worker shows Flower. A URL's password is
replaced by ``***`` whether or not the URL parses: in any ``scheme://…@host`` found in text,
everything after the first ``:`` of the part between ``://`` and the token's last ``@`` is hidden
(so a password holding ``@``, ``/`` or ``:`` is hidden whole), and so is the value of a
``password=`` query parameter.
"""

from __future__ import annotations

import logging
import re
import string
from collections.abc import Callable
from typing import Any

# A URL-looking token: a scheme, then everything up to whitespace or a quote (URLs turn up inside
# error messages, reprs and tracebacks; a token that is not a URL at all is left as it is). Found by
# hand, never by a regex that backtracks: ``[A-Za-z][A-Za-z0-9+.-]*://`` tried at every position of
# a long letter/digit token is quadratic (a worker logging one such token stalled).
_SCHEME_CHARS = frozenset(string.ascii_letters + string.digits + "+.-")
_SCHEME_MAX = 40  # a scheme longer than this is cut to its last 40 characters (it is shown as written)
_URL_END = frozenset("'\"<>`")
_QUERY_SECRET = re.compile(r"(?i)(?P<name>\b(?:password|passwd|pwd)=)(?P<secret>[^&\s'\"<>`]+)")
MASK = "***"
# Text is scanned (and kept) up to this many characters; the rest is cut with a note saying how much.
# Nothing saga-worker writes is that long: only a message or an error text from outside can be.
MAX_SCANNED = 100_000


def _hide_userinfo(rest: str) -> str:
    at = rest.rfind("@")
    if at > 0 and ":" in rest[:at]:
        user = rest[: rest.index(":")]
        rest = f"{user}:{MASK}{rest[at:]}"
    return rest


def _url_end(text: str, start: int) -> int:
    end, size = start, len(text)
    while end < size and text[end] not in _URL_END and not text[end].isspace():
        end += 1
    return end


def _hide_urls(text: str) -> str:
    """Every ``scheme://…`` token with its password hidden, in one left-to-right pass: each character
    is looked at a bounded number of times (a scheme at most 40 back, a token's rest once)."""
    out: list[str] = []
    done = search = 0  # text[:done] is written out; look for the next "://" from search
    while (mark := text.find("://", search)) >= 0:
        start = mark
        while start > max(done, mark - _SCHEME_MAX) and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < mark and text[start] not in string.ascii_letters:
            start += 1  # a scheme starts with a letter
        if start == mark:  # no scheme before this "://": not a URL
            search = mark + 1
            continue
        end = _url_end(text, mark + 3)
        out.append(text[done:start])
        out.append(text[start : mark + 3] + _hide_userinfo(text[mark + 3 : end]))
        done = search = end
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def _bounded(text: str) -> str:
    """``text`` cut to ``MAX_SCANNED`` characters, a note saying how many were cut. A token cut in two
    that could be a URL or a ``password=`` is dropped whole, so no part of a password is left."""
    if len(text) <= MAX_SCANNED:
        return text
    head = text[:MAX_SCANNED]
    last = max(head.rfind(c) for c in " \t\n\r'\"<>`")
    tail = head[last + 1 :]
    if "://" in tail or "=" in tail or "@" in tail:
        head = head[: last + 1]
    return f"{head}… [{len(text) - len(head)} characters not shown]"


def redact_text(text: str) -> str:
    """``text`` with the password of every URL in it (and every ``password=`` value) replaced by ``***``.

    Linear in the length of the text, and text longer than ``MAX_SCANNED`` characters is cut first."""
    text = _bounded(text)
    if "://" not in text and "=" not in text:
        return text
    return _QUERY_SECRET.sub(lambda m: m["name"] + MASK, _hide_urls(text))


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (parsed or not); otherwise as written."""
    return redact_text(url)


def redact_value(value: Any) -> Any:
    """``value`` with every string in it (through dicts, lists and tuples) redacted."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_value(v) for v in value)
    return value


SECRET_KEYS = ("password", "passwd", "secret", "token", "authorization", "api_key", "apikey", "cookie")


def _secret_key(key: object, names: tuple[str, ...]) -> bool:
    folded = str(key).lower().replace("-", "_")
    return any(name in folded for name in names)


def redact_secrets(value: Any, names: tuple[str, ...] = SECRET_KEYS) -> Any:
    """``value`` (a tool's input or output) with the value of every key whose name holds one of
    ``names`` (case-insensitive: ``Access_Token``, ``db_password``, ``X-Api-Key``) replaced by ``***``,
    through dicts and lists; then every string in it as ``redact_text`` leaves it."""
    if isinstance(value, dict):
        return {k: MASK if _secret_key(k, names) else redact_secrets(v, names) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_secrets(v, names) for v in value)
    return redact_value(value)


def redact_exception(exc: BaseException) -> BaseException:
    """Redact, in place, the text arguments of ``exc`` and of every exception in its chain (its cause
    and context), so its message, its traceback and what Celery stores of it hold no password."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        try:
            current.args = tuple(redact_value(a) for a in current.args)
            message = current.__dict__.get("message")
            if isinstance(message, str):  # a SagaError rebuilt from its ids keeps its text here
                current.message = redact_text(message)  # type: ignore[attr-defined]
            detail = getattr(current, "detail", None)
            if isinstance(detail, dict):
                current.detail = redact_value(detail)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - an exception type whose args cannot be set keeps them
            pass
        current = current.__cause__ or current.__context__
    return exc


class RedactingFilter(logging.Filter):
    """A handler filter: every record's message, arguments and exception text redacted.

    On a handler (not a logger), so it sees the records of every logger that propagates to it. With
    ``only``, just the records it says yes to: a worker's handlers are shared with the host app's
    own tasks, whose records are none of saga-worker's business (nor its cost)."""

    def __init__(self, only: Callable[[logging.LogRecord], bool] | None = None) -> None:
        super().__init__()
        self.only = only

    def filter(self, record: logging.LogRecord) -> bool:
        if self.only is not None and not self.only(record):
            return True
        if isinstance(record.msg, str):
            record.msg = redact_text(record.msg)
        if record.args:
            record.args = redact_value(record.args)
        if record.exc_info and record.exc_info[1] is not None:
            redact_exception(record.exc_info[1])
            record.exc_text = None  # formatted again, from the redacted exception
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        return True


def redact_logging(
    logger: logging.Logger | None = None, *, only: Callable[[logging.LogRecord], bool] | None = None
) -> None:
    """Put a ``RedactingFilter(only)`` on every handler of ``logger`` (the root logger by default), once."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter(only))
