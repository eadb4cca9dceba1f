"""A planner's decisions as the journal holds them: checked and given call ids before anything is
written (``encode_decision``), read back strictly (``decoded_calls``). Durable runs and ``saga()``
blocks journal their decisions alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.checks import check_call_id, check_storable_text
from ..core.keys import canonical_json
from ..core.storable import bounded_error, storable_text
from ..errors import InvalidInputError, MalformedRecordError, UnknownToolError
from .planning import Finish, ToolCall
from .tools import Tool


def encode_decision(
    run_id: str, decision: object, tools: Mapping[str, Tool], calls_so_far: int, used_ids: set[str]
) -> dict[str, Any]:
    """Validate a planner's answer and give every call its id, before anything is written."""
    if isinstance(decision, Finish):
        # The text is the run's answer: refused if unstorable. The error is a failure's words: kept, escaped.
        text = check_storable_text(str(decision.text), "the planner's Finish text", run_id=run_id)
        error = None if decision.error is None else storable_text(bounded_error(str(decision.error)))
        return {"kind": "finish", "text": text, "error": error}
    if isinstance(decision, ToolCall):
        decision = [decision]
    if not isinstance(decision, Sequence) or isinstance(decision, str | bytes):
        raise InvalidInputError(
            f"run {run_id!r}: planner must return a list of ToolCall or a Finish, "
            f"got {type(decision).__name__}",
            run_id=run_id,
        )
    calls = []
    seen = set(used_ids)
    for position, call in enumerate(decision, start=calls_so_far + 1):
        if not isinstance(call, ToolCall):
            raise InvalidInputError(
                f"run {run_id!r}: planner returned {type(call).__name__} where a ToolCall belongs",
                run_id=run_id,
            )
        if call.tool not in tools:
            raise UnknownToolError(run_id, call.tool, sorted(tools))
        call_id = check_call_id(call.id) if call.id is not None else f"call-{position}"
        if call_id in seen:
            raise InvalidInputError(
                f"run {run_id!r}: tool call id {call_id!r} is used twice", run_id=run_id, tool_call_id=call_id
            )
        seen.add(call_id)
        try:
            canonical_json(call.input)
        except InvalidInputError as exc:
            raise InvalidInputError(
                f"run {run_id!r}: the input of call {call_id!r} to tool {call.tool!r} cannot be "
                f"journaled: {exc.detail['reason']}; nothing was written",
                run_id=run_id,
                tool_call_id=call_id,
                tool_name=call.tool,
            ) from exc
        calls.append({"id": call_id, "tool": call.tool, "input": call.input})
    return {"kind": "calls", "calls": calls}


def decoded_calls(run_id: str, step: int, payload: Any) -> list[dict[str, Any]] | None:
    """The calls of a journaled decision, or None for a finish."""
    if not isinstance(payload, dict) or payload.get("kind") not in ("calls", "finish"):
        raise MalformedRecordError(run_id, f"decision {step}", "not a calls/finish decision")
    if payload["kind"] == "finish":
        return None
    calls = payload.get("calls")
    if not isinstance(calls, list) or not all(
        isinstance(c, dict) and {"id", "tool", "input"} <= c.keys() for c in calls
    ):
        raise MalformedRecordError(run_id, f"decision {step}", "calls are not {id, tool, input} objects")
    return calls
