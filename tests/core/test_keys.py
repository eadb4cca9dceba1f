"""Idempotency keys exactly as docs/reference/tools-and-runs.md spells them, computed here independently of the library."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saga_worker import CallOptions, InvalidInputError, Journal, Tool, ToolCall, run_durable, scripted
from saga_worker.core.checks import check_call_id, check_run_id, check_tool_name
from saga_worker.core.keys import (
    IdempotencyMode,
    canonical_json,
    compensate_key,
    execute_key,
    hash16,
    record_suffix,
)
from tests.reads import record_of


def expected_hash16(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def recording_tool(seen: list[CallOptions], *, idempotency: IdempotencyMode = "call") -> Tool:
    def execute(input: Any, opts: CallOptions) -> dict[str, str]:
        seen.append(opts)
        return {"key": opts.idempotency_key}

    return Tool(execute, idempotency=idempotency)


def test_canonical_json_sorts_keys_and_drops_spaces_and_keeps_unicode() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": "é", "c": None}]}) == '{"a":[1,{"c":null,"d":"é"}],"b":1}'


def test_hash16_is_the_first_16_hex_digits_of_sha256_of_canonical_json() -> None:
    value = {"amount": 10, "currency": "EUR", "items": ["b", "a"], "note": "crème"}
    assert hash16(value) == expected_hash16(value)
    assert len(hash16(value)) == 16
    assert hash16({"x": 1, "y": 2}) == hash16({"y": 2, "x": 1})


def test_key_helpers_have_the_documented_shapes() -> None:
    h = expected_hash16({"amount": 10})
    assert execute_key("order-7", "call", "charge", "call-1", {"amount": 10}) == "order-7:call-1"
    assert execute_key("order-7", "args", "charge", "call-1", {"amount": 10}) == f"order-7:charge:{h}"
    assert record_suffix("call", "charge", "call-1", {"amount": 10}) == "call-1"
    assert record_suffix("args", "charge", "call-1", {"amount": 10}) == f"args-charge-{h}"
    assert compensate_key("order-7", "call-1") == "order-7:comp:call-1"
    assert compensate_key("order-7", f"args-charge-{h}") == f"order-7:comp:args-charge-{h}"


def test_call_options_are_frozen() -> None:
    opts = CallOptions(idempotency_key="r:call-1", tool_call_id="call-1", run_id="r")
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.idempotency_key = "other"  # type: ignore[misc]  # writing a frozen field is the point


def test_call_mode_execute_key_is_run_id_colon_tool_call_id(journal: Journal, run_id: str) -> None:
    seen: list[CallOptions] = []
    run_durable(
        run_id,
        journal=journal,
        tools={"charge": recording_tool(seen)},
        planner=scripted(
            ToolCall("charge", {"amount": 10}), ToolCall("charge", {"amount": 5}, id="refund-x")
        ),
    )
    assert [o.idempotency_key for o in seen] == [f"{run_id}:call-1", f"{run_id}:refund-x"]
    assert [o.tool_call_id for o in seen] == ["call-1", "refund-x"]
    assert {o.run_id for o in seen} == {run_id}
    assert record_of(journal, run_id, "call-1").output == {"key": f"{run_id}:call-1"}


def test_args_mode_execute_key_is_run_id_tool_and_hash16_of_the_input(journal: Journal, run_id: str) -> None:
    seen: list[CallOptions] = []
    payload = {"to": "ana@example.com", "subject": "Bestätigung", "lines": [3, 1]}
    run_durable(
        run_id,
        journal=journal,
        tools={"email": recording_tool(seen, idempotency="args")},
        planner=scripted(ToolCall("email", payload)),
    )
    h = expected_hash16(payload)
    assert [o.idempotency_key for o in seen] == [f"{run_id}:email:{h}"]
    record = journal.get_record(run_id, f"args-email-{h}")
    assert record is not None and record.tool_call_id == "call-1"


def test_calls_without_ids_are_numbered_by_position_among_all_the_runs_calls(
    journal: Journal, run_id: str
) -> None:
    seen: list[CallOptions] = []
    tools = {"a": recording_tool(seen), "b": recording_tool(seen)}
    planner = scripted(
        ToolCall("a", {"n": 1}),
        [ToolCall("b", {"n": 2}), ToolCall("a", {"n": 3}, id="named"), ToolCall("b", {"n": 4})],
        ToolCall("a", {"n": 5}),
    )
    assert run_durable(run_id, journal=journal, tools=tools, planner=planner).status == "finished"
    assert [o.tool_call_id for o in seen] == ["call-1", "call-2", "named", "call-4", "call-5"]
    assert [r.suffix for r in journal.list_records(run_id)] == [
        "call-1",
        "call-2",
        "named",
        "call-4",
        "call-5",
    ]
    assert [r.step for r in journal.list_records(run_id)] == [1, 2, 2, 2, 3]


@pytest.mark.parametrize("bad", ["", "a:b", "-leading", "has space", "x" * 201, 7, None, "é"])
def test_run_ids_the_key_scheme_cannot_hold_are_refused(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="run id"):
        check_run_id(bad)


@pytest.mark.parametrize("bad", ["", "a:b", "a-b", "1abc", "has space", "x" * 101, 3])
def test_tool_names_the_key_scheme_cannot_hold_are_refused(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="tool name"):
        check_tool_name(bad)


@pytest.mark.parametrize("bad", ["", "a:b", "args-email-0123", "has space"])
def test_tool_call_ids_the_key_scheme_cannot_hold_are_refused(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="tool call id"):
        check_call_id(bad)


@pytest.mark.parametrize("good", ["order-7", "A.b_c-9", "7"])
def test_ordinary_run_ids_are_accepted(good: str) -> None:
    assert check_run_id(good) == good


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(value=JSON)
def test_hash16_matches_an_independent_sha256_of_canonical_json_for_any_json_value(value: Any) -> None:
    assert hash16(value) == expected_hash16(value)
    assert execute_key("r", "args", "t", "call-1", value) == f"r:t:{expected_hash16(value)}"


@settings(max_examples=100, deadline=None)
@given(value=st.dictionaries(st.text(), st.integers(), min_size=2, max_size=6))
def test_hash16_does_not_depend_on_key_order(value: dict[str, int]) -> None:
    assert hash16(dict(reversed(list(value.items())))) == hash16(value)


def test_call_numbering_continues_from_the_journaled_calls_after_a_resume(
    journal: Journal, run_id: str
) -> None:
    seen: list[CallOptions] = []

    class Crash(BaseException):
        pass

    crashed = False

    def planner(state: Any) -> Any:
        nonlocal crashed
        if state.step == 0:
            return [ToolCall("a", {"n": 1}), ToolCall("a", {"n": 2})]
        if len(seen) == 2 and not crashed:
            crashed = True
            raise Crash  # the first process dies before its second decision
        return scripted(ToolCall("a", {}), ToolCall("a", {"n": 3}))(state)

    with pytest.raises(Crash):
        run_durable(run_id, journal=journal, tools={"a": recording_tool(seen)}, planner=planner)
    run_durable(run_id, journal=journal, tools={"a": recording_tool(seen)}, planner=planner)
    assert [o.idempotency_key for o in seen] == [f"{run_id}:call-1", f"{run_id}:call-2", f"{run_id}:call-3"]
