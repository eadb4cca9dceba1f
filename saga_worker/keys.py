"""Idempotency keys and the identifiers they are built from (docs/reference/tools-and-runs.md).

Keys are stable forever: providers deduplicate on them, so nothing here may change shape.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from .errors import InvalidInputError
from .storable import has_surrogate, surrogate_problem

IdempotencyMode = Literal["call", "args", "cross-run"]
# How a cross-run call's records are marked (the mode column holds 8 characters).
CROSS_MODE = "cross"

# ":" separates the parts of a key and "-" the parts of an args suffix; an id holding either part
# separator in the wrong place would make two different calls share one key.
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")
_TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,99}$")
_CALL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")


def canonical_json(value: Any) -> str:
    """The one JSON text of a value that hashes are taken over and journals store (keys sorted, no
    spaces). Raises InvalidInputError, its ``detail["reason"]`` saying why, for a value that is not
    JSON or holds a lone surrogate (no UTF-8 form: it could be neither hashed nor stored)."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
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


SHOWN_MAX = 60  # characters of a refused id an error shows: an id from a message may be a megabyte


def shown(value: object) -> str:
    """``repr`` of a refused value for an error message, at most ~60 characters of it (and its length)."""
    if isinstance(value, str) and len(value) > SHOWN_MAX:
        return f"{value[:SHOWN_MAX]!r}… ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= 2 * SHOWN_MAX else f"{text[: 2 * SHOWN_MAX]}… ({type(value).__name__})"


def clipped(value: object) -> object:
    """A refused value as an error's ``detail`` holds it: as given, or its first ~60 characters."""
    return f"{value[:SHOWN_MAX]}…" if isinstance(value, str) and len(value) > SHOWN_MAX else value


def check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str) or len(run_id) > 200 or not _RUN_ID.match(run_id):
        raise InvalidInputError(
            f"run id {shown(run_id)} cannot be used in idempotency keys: use 1-200 characters of letters, "
            "digits, '_', '.', '-', starting with a letter or digit (':' separates key parts)",
            run_id=clipped(run_id),
        )
    return run_id


def check_tool_name(name: object) -> str:
    if not isinstance(name, str) or len(name) > 100 or not _TOOL_NAME.match(name):
        raise InvalidInputError(
            f"tool name {shown(name)} cannot be used in idempotency keys: use 1-100 characters of letters, "
            "digits, '_' and '.', starting with a letter or '_' (':' and '-' separate key parts)",
            tool_name=clipped(name),
        )
    return name


def check_call_id(call_id: object) -> str:
    if (
        not isinstance(call_id, str)
        or len(call_id) > 200
        or not _CALL_ID.match(call_id)
        or call_id.startswith("args-")
    ):
        raise InvalidInputError(
            f"tool call id {shown(call_id)} cannot be used in idempotency keys: use 1-200 characters of "
            "letters, digits, '_', '.', '-', not starting with 'args-'",
            tool_call_id=clipped(call_id),
        )
    return call_id


UNWIND_ID_MAX = 200  # the journal's unwind id column (saga_unwinds.unwind_id)


def check_unwind_id(unwind_id: object) -> str:
    """An unwind id (a Celery task id) must fit its column and be plain text: checked before the
    tombstone, so a bad one is refused rather than condemning the run and then failing to record."""
    if (
        not isinstance(unwind_id, str)
        or not 1 <= len(unwind_id) <= UNWIND_ID_MAX
        or not unwind_id.isprintable()
    ):
        shown = unwind_id[:40] + "…" if isinstance(unwind_id, str) and len(unwind_id) > 40 else unwind_id
        size = f" ({len(unwind_id)} characters)" if isinstance(unwind_id, str) else ""
        raise InvalidInputError(
            f"unwind id {shown!r}{size} cannot be recorded: use 1-{UNWIND_ID_MAX} printable characters "
            "(a Celery task id is used as the unwind id)",
            unwind_id=shown,
        )
    return unwind_id


def check_dry_run(dry_run: object) -> bool:
    """``dry_run`` decides between a plan and an irreversible unwind: only a real boolean may decide it
    (a JSON ``false``, not ``None``, ``0``, ``""`` or the text ``"false"``)."""
    if not isinstance(dry_run, bool):
        raise InvalidInputError(
            f"dry_run must be true or false (a JSON boolean), got {type(dry_run).__name__} {dry_run!r}; "
            "nothing was written",
            dry_run=repr(dry_run),
        )
    return dry_run


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
