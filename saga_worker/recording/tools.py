"""Tools: the side-effecting calls a run makes, with the hooks that undo and probe them."""

from __future__ import annotations

import asyncio
import inspect
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.checks import check_tool_name
from ..core.frozen import quick
from ..core.keys import IdempotencyMode, json_problem
from ..core.storable import exception_text
from ..errors import InvalidInputError, SideEffectRetryBlockedError
from ..journal.records import ToolRecord
from ..observing import tracing


@quick
@dataclass(frozen=True)
class CallOptions:
    """What a hook is told about the call it serves. The key is the one to hand the provider."""

    idempotency_key: str
    tool_call_id: str
    run_id: str
    # For a Tool(in_transaction=True) execute: the DBAPI connection of the journal's transaction, in
    # which the hook writes its effect (and must not commit). None for every other hook.
    connection: Any = None


@quick
@dataclass(frozen=True)
class RecoverResult:
    """A ``recover`` hook's answer: did the side effect happen, and with what output."""

    done: bool
    output: Any = None


class NoEffect(Exception):  # noqa: N818 - it names what the tool declares, not an error kind
    """Raised by ``execute`` to say the call failed **before any side effect** (a declined card, a
    request the provider refused): its record is ``failed`` and says so, an unwind reads the step
    ``skipped-not-executed`` without asking ``recover``, and a resume may execute the call again
    (with the same key). Raise it only when nothing can have happened; any other exception leaves
    the question to ``recover``."""


Hook = Callable[..., Any]


def _seconds(owner: str, name: str, value: Any, *, minimum: float, inclusive: bool) -> float:
    """A finite number of seconds (not a bool), at least ``minimum``; the error names the field."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value >= minimum if inclusive else value > minimum)
    )
    if not ok:
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise InvalidInputError(f"{owner}({name}=...) must be a finite number {bound}, got {value!r}")
    return float(value)


@dataclass(frozen=True, init=False)
class RetryPolicy:
    """How one unwind retries a ``compensate`` hook that raised (Temporal's RetryPolicy, bounded).

    ``attempts`` hook calls at most per unwind (1: no retry, today's behaviour); before attempt n+1
    the unwind waits ``min(initial_interval * backoff ** (n - 1), max_interval)`` seconds, holding
    the step's claim. ``max_interval`` defaults to 100 x ``initial_interval``, as Temporal's does.
    Unlike Temporal there is no "unlimited": an unwind that never ends holds its run; the sweeper
    retries across unwinds."""

    attempts: int
    initial_interval: float
    backoff: float
    max_interval: float

    def __init__(
        self,
        attempts: int = 1,
        *,
        initial_interval: float = 1.0,
        backoff: float = 2.0,
        max_interval: float | None = None,
    ) -> None:
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise InvalidInputError(f"RetryPolicy(attempts=...) must be an int >= 1, got {attempts!r}")
        initial = _seconds("RetryPolicy", "initial_interval", initial_interval, minimum=0.0, inclusive=True)
        coefficient = _seconds("RetryPolicy", "backoff", backoff, minimum=1.0, inclusive=True)
        cap = (
            initial * 100
            if max_interval is None
            else _seconds("RetryPolicy", "max_interval", max_interval, minimum=0.0, inclusive=True)
        )
        if cap < initial:
            raise InvalidInputError(
                f"RetryPolicy(max_interval=...) must be >= initial_interval ({initial:g}), got {max_interval!r}"
            )
        object.__setattr__(self, "attempts", attempts)
        object.__setattr__(self, "initial_interval", initial)
        object.__setattr__(self, "backoff", coefficient)
        object.__setattr__(self, "max_interval", cap)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based) before the next one."""
        if self.initial_interval == 0:
            return 0.0
        # Capped before it can overflow: backoff ** n grows past a float for large n.
        n = min(attempt - 1, 1000)
        try:
            raw = self.initial_interval * self.backoff**n
        except OverflowError:
            return self.max_interval
        return min(raw, self.max_interval)


NO_RETRY = RetryPolicy()
# ``needs_approval``: True, or ``(input) -> bool``; ``compensate_needs_approval``: True, or
# ``(input, output) -> bool``.
ApprovalRule = bool | Callable[..., Any]


def _check_hooks(execute: Any, compensate: Any, recover: Any) -> None:
    if not callable(execute):
        raise InvalidInputError(f"Tool(execute=...) must be callable, got {type(execute).__name__}")
    for name, hook in (("compensate", compensate), ("recover", recover)):
        if hook is not None and not callable(hook):
            raise InvalidInputError(f"Tool({name}=...) must be callable or None, got {type(hook).__name__}")


def _check_modes(
    idempotency: Any, needs_approval: Any, compensate_needs_approval: Any, window_s: Any
) -> None:
    if idempotency not in ("call", "args", "cross-run"):
        raise InvalidInputError(
            f"Tool(idempotency=...) must be 'call', 'args' or 'cross-run', got {idempotency!r}"
        )
    for name, rule in (
        ("needs_approval", needs_approval),
        ("compensate_needs_approval", compensate_needs_approval),
    ):
        if not isinstance(rule, bool) and not callable(rule):
            raise InvalidInputError(
                f"Tool({name}=...) must be True, False or a callable, got {type(rule).__name__}"
            )
    if idempotency == "cross-run":
        if (
            isinstance(window_s, bool)
            or not isinstance(window_s, int | float)
            or not window_s > 0
            or window_s != window_s
        ):
            raise InvalidInputError(
                f"Tool(idempotency='cross-run') needs window_s, a number of seconds > 0, got {window_s!r}"
            )
    elif window_s is not None:
        raise InvalidInputError("Tool(window_s=...) only applies to idempotency='cross-run'")


class Tool:
    """A side-effecting call with optional ``compensate`` (undo) and ``recover`` (probe) hooks."""

    __slots__ = (
        "execute",
        "compensate",
        "recover",
        "idempotency",
        "side_effect",
        "idempotent",
        "description",
        "needs_approval",
        "compensate_needs_approval",
        "window_s",
        "compensate_timeout",
        "compensate_retry",
        "in_transaction",
    )

    def __init__(
        self,
        execute: Hook,
        compensate: Hook | None = None,
        recover: Hook | None = None,
        *,
        idempotency: IdempotencyMode = "call",
        side_effect: bool = True,
        idempotent: bool = False,
        description: str = "",
        needs_approval: ApprovalRule = False,
        compensate_needs_approval: ApprovalRule = False,
        window_s: float | None = None,
        compensate_timeout: float | None = None,
        compensate_retry: RetryPolicy | None = None,
        in_transaction: bool = False,
    ) -> None:
        _check_hooks(execute, compensate, recover)
        _check_modes(idempotency, needs_approval, compensate_needs_approval, window_s)
        if in_transaction and (idempotency == "cross-run" or not side_effect):
            raise InvalidInputError(
                "Tool(in_transaction=True) is for a side-effecting call of its own run ('call' or 'args' "
                "idempotency): its effect is written in the transaction that records it"
            )
        # The effect is a write to the journal's own database, made by execute on opts.connection in
        # the very transaction that records the call: both commit, or neither (docs/guides/django.md).
        self.in_transaction = bool(in_transaction)
        self.execute = execute
        self.compensate = compensate
        self.recover = recover
        self.idempotency: IdempotencyMode = idempotency
        self.side_effect = bool(side_effect)
        self.idempotent = bool(idempotent)
        self.description = description
        self.needs_approval = needs_approval
        self.compensate_needs_approval = compensate_needs_approval
        self.window_s = float(window_s) if window_s is not None else None
        # The compensation policy (docs/reference/tools-and-runs.md): None keeps the unwind as it was.
        self.compensate_timeout = (
            None
            if compensate_timeout is None
            else _seconds("Tool", "compensate_timeout", compensate_timeout, minimum=0.0, inclusive=False)
        )
        if compensate_retry is not None and not isinstance(compensate_retry, RetryPolicy):
            raise InvalidInputError(
                f"Tool(compensate_retry=...) must be a RetryPolicy or None, got {type(compensate_retry).__name__}"
            )
        self.compensate_retry = compensate_retry if compensate_retry is not None else NO_RETRY
        if compensate is None:
            for name, given in (
                ("compensate_timeout", compensate_timeout),
                ("compensate_retry", compensate_retry),
            ):
                if given is not None:
                    raise InvalidInputError(f"Tool({name}=...) only applies to a tool with a compensate hook")

    def call_needs_approval(self, input: Any) -> bool:
        """Must a person approve this call before it executes? A rule that raises says yes (fail closed)."""
        return _ask(self.needs_approval, input)

    def compensation_needs_approval(self, input: Any, output: Any) -> bool:
        """Must a person approve undoing this call? A rule that raises says yes (fail closed)."""
        return _ask(self.compensate_needs_approval, input, output)

    def __repr__(self) -> str:
        name = getattr(self.execute, "__name__", "execute")
        return f"Tool({name}, compensate={self.compensate is not None}, recover={self.recover is not None})"


def _ask(rule: ApprovalRule, *args: Any) -> bool:
    if isinstance(rule, bool):
        return rule
    try:
        return bool(call_hook(rule, *args))
    except Exception:
        return True


def check_tools(tools: Mapping[str, Tool] | None) -> dict[str, Tool]:
    """Validate a tools mapping up front, so a bad entry is named before anything is written."""
    if tools is None:
        return {}
    if not isinstance(tools, Mapping):
        raise InvalidInputError(f"tools must be a mapping of name to Tool, got {type(tools).__name__}")
    for name, tool in tools.items():
        check_tool_name(name)
        if not isinstance(tool, Tool):
            raise InvalidInputError(
                f"tools[{name!r}] must be a Tool, got {type(tool).__name__}", tool_name=name
            )
    return dict(tools)


@dataclass(frozen=True)
class RecoverRefusal:
    """Why a ``recover`` answer cannot be used: it raised (``cause``), or answered anything but a
    RecoverResult. The run engine refuses to execute again on it, the unwind reads the step uncertain."""

    reason: str
    cause: BaseException | None = None


def ask_recover(
    tool: Tool, input: Any, opts: CallOptions, *, tool_name: str | None = None
) -> RecoverResult | RecoverRefusal:
    """Ask ``tool.recover`` (which it must have) whether an interrupted or failed call took effect
    (under a ``saga.recover`` span, when traced: ``tool_name`` names it)."""
    with tracing.recover(opts, tool_name) as span:
        answer = _ask_recover(tool, input, opts)
        span.answer(answer)
        return answer


def _ask_recover(tool: Tool, input: Any, opts: CallOptions) -> RecoverResult | RecoverRefusal:
    assert tool.recover is not None
    try:
        answer = call_hook(tool.recover, input, opts)
    except Exception as exc:
        return RecoverRefusal(f"recover raised {exception_text(exc)}", exc)
    if not isinstance(answer, RecoverResult):
        return RecoverRefusal(f"recover answered {type(answer).__name__}, not a RecoverResult")
    return answer


def usable_recover_answer(
    run_id: str, record: ToolRecord, answer: RecoverResult | RecoverRefusal
) -> RecoverResult:
    """``recover``'s answer, if the run can act on it: one that cannot be used, or whose output
    cannot be journaled, refuses to execute the call again rather than risk a second effect."""
    if isinstance(answer, RecoverRefusal):
        raise SideEffectRetryBlockedError(
            run_id, record.tool_call_id, record.tool_name, answer.reason
        ) from answer.cause
    problem = json_problem(answer.output) if answer.done else None
    if problem is not None:
        raise SideEffectRetryBlockedError(
            run_id,
            record.tool_call_id,
            record.tool_name,
            f"the output recover answered cannot be journaled: {problem}",
        )
    return answer


_PLAIN = frozenset({dict, list, tuple, str, int, float, bool, bytes})


def call_hook(hook: Hook, *args: Any) -> Any:
    """Call a hook that may be a plain function or ``async def``, from sync code, anywhere.

    Inside a running event loop (an async app calling the sync API) the coroutine is driven on a
    private thread with its own loop, since the caller's loop is blocked by this very call.
    """
    result = hook(*args)
    # A hook's usual answer is a plain value, never awaitable: asked of its type alone, without
    # ``isawaitable``'s three isinstance checks (one of them an ABC's).
    if result is None or type(result) in _PLAIN or not inspect.isawaitable(result):
        return result
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await(result))
    box: dict[str, Any] = {}

    def drive() -> None:
        try:
            box["value"] = asyncio.run(_await(result))
        except BaseException as exc:  # handed back to the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=drive, name="saga-async-hook")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


async def _await(awaitable: Any) -> Any:
    return await awaitable
