"""How a journal value is shown on a page or in the API: a preview cut to a line, the whole JSON
when it is short enough to show inline, times as ISO 8601; secrets hidden in every form. The runs
listing, a run's unwinds and the inbox all show values this way.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..core.keys import canonical_json
from ..core.redact import SECRET_KEYS, redact_secrets, redact_text
from ..errors import InvalidInputError

PREVIEW_CHARS = 240
WHOLE_INLINE_CHARS = 20_000  # a value up to this long is also shown whole on the page; beyond, downloaded


def iso(ts: float | None) -> str | None:
    """An epoch time as ISO 8601 UTC with milliseconds (the API gives both)."""
    if ts is None:
        return None
    whole = int(ts)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((ts - whole) * 1000):03d}Z"


def span(start: float | None, end: float | None, prefix: str = "") -> dict[str, Any]:
    """Start, end and duration, in epoch seconds and ISO 8601 (``prefix`` names them)."""
    return {
        f"{prefix}started_at_iso": iso(start),
        f"{prefix}ended_at": end,
        f"{prefix}ended_at_iso": iso(end),
        f"{prefix}duration_s": None if start is None or end is None else round(max(0.0, end - start), 3),
    }


def preview(value: Any, limit: int = PREVIEW_CHARS, secret_keys: tuple[str, ...] = SECRET_KEYS) -> str:
    """A value's JSON text, cut to ``limit`` characters, URL passwords and the values of keys named
    like secrets (``secret_keys``) hidden."""
    if value is None:
        return ""
    try:
        text = canonical_json(redact_secrets(value, secret_keys))
    except InvalidInputError:
        text = repr(redact_secrets(value, secret_keys))
    except RecursionError:
        text = "(nested too deeply to show)"
    text = redact_text(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cut(text: str, limit: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty(value: Any, secret_keys: tuple[str, ...] = SECRET_KEYS) -> str:
    """A value's whole JSON, indented, with the secrets hidden as in a preview."""
    try:
        return redact_text(
            json.dumps(redact_secrets(value, secret_keys), indent=2, sort_keys=True, default=repr)
        )
    except (TypeError, ValueError, RecursionError):
        return "(cannot be shown as JSON)"


def whole(value: Any, secret_keys: tuple[str, ...] = SECRET_KEYS) -> str | None:
    """The whole value, indented, when its preview is cut and it is short enough to show inline;
    None otherwise (its preview is whole, or it is only downloaded)."""
    if value is None or len(preview(value, secret_keys=secret_keys)) < PREVIEW_CHARS:
        return None
    text = pretty(value, secret_keys)
    return text if len(text) <= WHOLE_INLINE_CHARS else None
