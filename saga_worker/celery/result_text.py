"""The text Celery shows for a task's result, made without its slow path for a flat dict.

Celery writes ``saferepr(result, resultrepr_maxsize)`` after every task that returns (the "succeeded"
log line, and the ``task-succeeded`` event Flower shows). Its ``saferepr`` streams tokens through a
generator of named tuples, about 90 µs here for a saga step's result (its report entry: 13 keys),
five times per 5-step unwind. This module gives ``celery.app.trace`` a ``saferepr`` that writes the
same text directly when the result is a dict of ``str`` keys and ``str``, ``int``, ``float``, ``bool``
or ``None`` values that fits within the limit (about 7 µs), and hands anything else to Celery's own.

The same text, character for character: strings quoted as Celery quotes them (``'`` escaped, nothing
else), numbers as ``str()``, ``None`` as ``None``; a text that would reach the limit, which Celery
would cut, goes to Celery's function. Applied in worker processes only (``worker_init``; the pool's
children inherit it), so it reaches every task of the worker, the host app's included, with no
difference but the CPU. Only on the Celery releases it was checked against
(``checked_releases.CELERY_TRACER_TEXT``) and while the tracer still writes the text through its
module global ``saferepr``: otherwise Celery's own function stays.
"""

from __future__ import annotations

import inspect
from typing import Any

from celery.app import trace
from celery.utils.saferepr import saferepr as celery_saferepr

from .checked_releases import CELERY_TRACER_TEXT, may_patch

_PLAIN_NUMBERS = (int, float, bool)
_CELERY_MAXLEVELS = 3  # saferepr's default, which the tracer uses


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "\\'") + "'"


def _flat_dict_text(value: dict[Any, Any], maxlen: int | None) -> str | None:
    """``value`` as Celery's saferepr writes it when the whole is shorter than ``maxlen``; None if any
    key or value is of a kind this does not write, or as soon as the text reaches the limit (Celery
    would cut it, and cuts a long text faster than this would write it out)."""
    limit = float("inf") if maxlen is None else maxlen
    parts: list[str] = []
    size = 2  # the braces
    for key, item in value.items():
        if type(key) is not str or len(key) >= limit:
            return None
        kind = type(item)
        if kind is str:
            if len(item) >= limit:
                return None
            text = _quoted(item)
        elif item is None:
            text = "None"
        elif kind in _PLAIN_NUMBERS:
            text = str(item)
        else:
            return None
        part = f"{_quoted(key)}: {text}"
        size += len(part) + 2 * bool(parts)  # ", " between parts
        if size >= limit:
            return None
        parts.append(part)
    return "{" + ", ".join(parts) + "}"


def saferepr(o: Any, maxlen: int | None = None, maxlevels: int = _CELERY_MAXLEVELS, seen: Any = None) -> str:
    """Celery's ``saferepr(o, maxlen, maxlevels, seen)``, written directly for a flat dict."""
    # Celery cuts a token as long as what is left of the limit: only a shorter text is whole.
    if type(o) is dict and maxlevels == _CELERY_MAXLEVELS and seen is None and (maxlen is None or maxlen > 2):
        text = _flat_dict_text(o, maxlen)
        if text is not None:
            return text
    return celery_saferepr(o, maxlen, maxlevels, seen)


def _still_there() -> bool:
    """Celery's tracer still calls a module global ``saferepr(o, maxlen, maxlevels, seen)`` of
    Celery's own (or this one, once applied)."""
    if getattr(trace, "saferepr", None) not in (celery_saferepr, saferepr):
        return False
    build_tracer = getattr(trace, "build_tracer", None)
    code = getattr(build_tracer, "__code__", None)
    if code is None or "saferepr" not in _names_used(code):
        return False
    try:
        params = inspect.signature(celery_saferepr).parameters
    except (TypeError, ValueError):
        return False
    return (
        list(params) == ["o", "maxlen", "maxlevels", "seen"]
        and params["maxlevels"].default == _CELERY_MAXLEVELS
    )


def _names_used(code: Any) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _names_used(const)
    return names


def speed_up_result_text() -> bool:
    """From now on, Celery's tracer in this process writes a task's result text with :func:`saferepr`;
    False (and Celery's own function) on a Celery release this was not checked against."""
    if not may_patch(
        "a result's text written directly", "celery", CELERY_TRACER_TEXT, still_there=_still_there()
    ):
        return False
    trace.saferepr = saferepr  # type: ignore[attr-defined]  # a module global of Celery's tracer
    return True


__all__ = ["saferepr", "speed_up_result_text"]
