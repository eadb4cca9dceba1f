"""The one place secrets are hidden before text leaves the process (issue 10, item 5).

Everything we print, log, store or expose goes through here: the CLI's one-line errors and its
console output, the worker's log lines (a filter on every handler), the exceptions a task stores in
the result backend, the web console, the Celery conf a worker shows Flower. A URL's password is
replaced by ``***`` whether or not the URL parses: in any ``scheme://…@host`` found in text,
everything after the first ``:`` of the part between ``://`` and the token's last ``@`` is hidden
(so a password holding ``@``, ``/`` or ``:`` is hidden whole), and so is the value of a
``password=`` query parameter.
"""

from __future__ import annotations

import logging
import re
from typing import Any

# A URL-looking token: a scheme, then everything up to whitespace or a quote (URLs turn up inside
# error messages, reprs and tracebacks; a token that is not a URL at all is left as it is).
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>[^\s'\"<>`]*)")
_QUERY_SECRET = re.compile(r"(?i)(?P<name>\b(?:password|passwd|pwd)=)(?P<secret>[^&\s'\"<>`]+)")
MASK = "***"


def _hide_userinfo(match: re.Match[str]) -> str:
    rest = match["rest"]
    at = rest.rfind("@")
    if at > 0 and ":" in rest[:at]:
        user = rest[: rest.index(":")]
        rest = f"{user}:{MASK}{rest[at:]}"
    return match["scheme"] + rest


def redact_text(text: str) -> str:
    """``text`` with the password of every URL in it (and every ``password=`` value) replaced by ``***``."""
    if "://" not in text and "=" not in text:
        return text
    return _QUERY_SECRET.sub(lambda m: m["name"] + MASK, _URL.sub(_hide_userinfo, text))


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

    On a handler (not a logger), so it sees the records of every logger that propagates to it."""

    def filter(self, record: logging.LogRecord) -> bool:
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


def redact_logging(logger: logging.Logger | None = None) -> None:
    """Put a ``RedactingFilter`` on every handler of ``logger`` (the root logger by default), once."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
