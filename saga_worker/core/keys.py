"""Idempotency keys and the identifiers they are built from (docs/reference/tools-and-runs.md).

Keys are stable forever: providers deduplicate on them, so nothing here may change shape.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from ..errors import InvalidInputError
from .storable import has_surrogate, surrogate_problem

IdempotencyMode = Literal["call", "args", "cross-run"]
# How a cross-run call's records are marked (the mode column holds 8 characters).
CROSS_MODE = "cross"


# ``json.dumps`` with options builds an encoder on every call; this one is made once (``encode`` keeps
# no state between calls: its circular-reference markers are made per call).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """The one JSON text of a value that hashes are taken over and journals store (keys sorted, no
    spaces). Raises InvalidInputError, its ``detail["reason"]`` saying why, for a value that is not
    JSON or holds a lone surrogate (no UTF-8 form: it could be neither hashed nor stored)."""
    try:
        text = _CANONICAL.encode(value)
    except (TypeError, ValueError) as exc:
        reason = f"it is not JSON-serialisable ({exc})"
        raise InvalidInputError(f"value cannot be stored as JSON: {reason}", reason=reason) from exc
    if has_surrogate(text):
        reason = surrogate_problem(value)
        raise InvalidInputError(f"value cannot be stored as JSON: {reason}", reason=reason)
    return text


def json_problem(value: Any) -> str | None:
    """Why ``value`` cannot be stored as JSON (see ``canonical_json``), or None if it can."""
    try:
        canonical_json(value)
    except InvalidInputError as exc:
        return str(exc.detail["reason"])
    return None


def is_json_value(value: Any) -> bool:
    return json_problem(value) is None


def hash16(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()[:16]


def record_suffix(mode: IdempotencyMode, tool_name: str, tool_call_id: str, input: Any) -> str:
    """The suffix naming a tool record within its run: the call id, or one per (tool, input) in args mode."""
    if mode == "args":
        return f"args-{tool_name}-{hash16(input)}"
    return tool_call_id


def execute_key(
    origin_run_id: str, mode: IdempotencyMode | str, tool_name: str, tool_call_id: str, input: Any
) -> str:
    if mode == "args":
        return f"{origin_run_id}:{tool_name}:{hash16(input)}"
    if mode in (CROSS_MODE, "cross-run"):
        return shared_key(tool_name, input)
    return f"{origin_run_id}:{tool_call_id}"


def shared_key(tool_name: str, input: Any) -> str:
    """The key of a cross-run shared execution: no run id, so identical calls of any run share it."""
    return f"{tool_name}:{hash16(input)}"


def compensate_key(origin_run_id: str, suffix: str) -> str:
    return f"{origin_run_id}:comp:{suffix}"
