"""OpenAI Agents SDK: ``@saga_tool`` under ``@function_tool``, and a runner that takes the run id.

```python
from agents import Agent, function_tool
from saga_worker.integrations import hooks
from saga_worker.integrations.openai_agents import SagaRunner, saga_tool

@function_tool(needs_approval=True)
@saga_tool
async def charge(amount: int) -> dict: ...

runner = SagaRunner(journal=journal, tools={"charge": hooks(compensate=refund)})
result = await runner.run(agent, "place order 7", run_id="order-7")        # or runner.run_sync(...)
```

The SDK has no interceptor around every function tool, so the journal sits in two places it does
offer: ``@saga_tool`` wraps the tool function itself (the SDK sees the same signature, plus the
``ToolContext`` it hands to tools that ask for one), and ``SagaRunner`` wraps ``Runner.run`` (a
condemned run id refuses to start; run hooks number each model response's function calls in order,
and a resumed ``RunState`` brings the numbers of the calls it holds). A call the SDK rejects before
the tool function runs (arguments that fail its schema) never reaches ``@saga_tool`` and takes no
position; nor does a call of a function tool without ``@saga_tool`` (it is not journaled). The runner
tells them apart as the SDK will: ``@saga_tool`` keeps the tool's own parameter model, and each
model response's calls are checked against it when the response arrives. Human approvals
(``needs_approval``) come before the tool function, so a call executes only once approved, and a
second resume from the same saved state replays it instead of executing it again.

The SDK turns a tool's exception into a message for the model. saga-worker's refusals
(``CompensatedRunError``, ``ReplayMismatchError``, ``SideEffectRetryBlockedError``) must stop the
run instead: the runner raises them at the end of the tool step, and from ``run`` itself.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar, cast, get_origin, get_type_hints

from . import missing_extra

try:
    from agents import Agent, FunctionTool, RunContextWrapper, RunHooks, Runner, RunResult
    from agents.function_schema import function_schema
    from agents.run_state import RunState
    from agents.tool_context import ToolContext
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test in a clean env
    raise missing_extra("openai_agents", exc) from exc

from ..core.checks import check_run_id
from ..errors import InvalidInputError, SagaError
from ..journal.roles import RunJournal
from ..recording.tools import Tool, check_tools
from ._agent import AgentJournal, HistoryCall, Slot, slot_of

F = TypeVar("F", bound=Callable[..., Any])


_SAGA_CHECK = "__saga_arguments_check__"  # on a @saga_tool function: does the SDK accept these arguments?
_ArgumentsCheck = Callable[[str], bool]
_FunctionCall = tuple[str, str, str]  # the SDK's call id, the tool's name, its arguments (JSON text)


class _SdkRun:
    """One ``SagaRunner.run``: the journal, the run's function calls per model response, the checks
    of the agents' tools (which calls reach ``@saga_tool``), the calls seen to reach it and to end
    without reaching it, the first refusal."""

    def __init__(self, journal: AgentJournal, responses: list[list[_FunctionCall]]) -> None:
        self.journal = journal
        self.responses = responses
        self.checks: dict[str, _ArgumentsCheck | None] = {}
        self.reached: set[str] = set()
        self.ended: set[str] = set()
        self.refusal: SagaError | None = None

    def note_agent(self, agent: Any) -> None:
        for tool in getattr(agent, "tools", None) or []:
            if isinstance(tool, FunctionTool):
                self.checks.setdefault(tool.name, _arguments_check(tool))

    def note_response(self, response: Any) -> None:
        self.responses.append(_function_calls(getattr(response, "output", None) or []))

    def reaches(self, call: _FunctionCall) -> bool:
        """Whether a call reaches ``@saga_tool`` (is journaled): seen to, or checked as the SDK will."""
        call_id, name, arguments = call
        if call_id in self.reached:
            return True
        if name in self.checks:
            check = self.checks[name]
            return check is not None and check(arguments)
        return call_id not in self.ended  # a tool we cannot check: what the run has seen of it

    def slot(self, call_id: str) -> Slot:
        self.reached.add(call_id)
        responses = [[HistoryCall(c[0], self.reaches(c)) for c in calls] for calls in self.responses]
        return slot_of(call_id, responses)

    def raise_refusal(self) -> None:
        if self.refusal is not None:
            raise self.refusal


_RUN: ContextVar[_SdkRun | None] = ContextVar("saga_openai_agents_run", default=None)


def _function_calls(items: Any) -> list[_FunctionCall]:
    calls = []
    for item in items:
        field = item.get if isinstance(item, dict) else functools.partial(getattr, item)
        if field("type", None) == "function_call":
            calls.append(
                (str(field("call_id", None)), str(field("name", None)), str(field("arguments", None) or ""))
            )
    return calls


def _arguments_check(tool: FunctionTool) -> _ArgumentsCheck | None:
    """The check ``@saga_tool`` left on the tool's function; None for a function tool without it
    (never journaled). The SDK keeps the function on its invoker, which is not public API: a tool
    where it cannot be found is numbered by what the run sees of it instead."""
    impl = getattr(tool.on_invoke_tool, "_invoke_tool_impl", None)
    wrapped = getattr(impl, "__agents_function_tool_wrapped_callable__", None)
    if wrapped is None:
        return _unknown_check
    check = getattr(wrapped, _SAGA_CHECK, None)
    return check if callable(check) else None


def _unknown_check(arguments: str) -> bool:
    return True


def _calls_before(input: Any) -> list[list[_FunctionCall]]:
    """The function calls a run starts with: in its input items, and in a resumed state's responses."""
    if isinstance(input, RunState):
        original = input._original_input if isinstance(input._original_input, list) else []
        responses = [_function_calls(original)]
        for response in input._model_responses:
            responses.append(_function_calls(response.output))
        return responses
    return [_function_calls(input)] if isinstance(input, list) else []


# -- the tool decorator ---------------------------------------------------------------------------


def _takes_context(fn: Callable[..., Any]) -> bool:
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        return False
    try:
        hints = get_type_hints(fn)
    except Exception:
        hints = {}
    ann = hints.get(params[0].name, params[0].annotation)
    origin = get_origin(ann) or ann
    return isinstance(origin, type) and issubclass(origin, RunContextWrapper)


def _prepare_call(ctx: ToolContext[Any]) -> tuple[_SdkRun, Any, Slot]:
    """The run a tool call belongs to, its JSON arguments and its position among the run's calls;
    a clear error when the tool runs outside :class:`SagaRunner` or its arguments are not JSON."""
    run = _RUN.get()
    if run is None:
        raise InvalidInputError(
            f"tool {ctx.tool_name!r} is journaled by saga-worker: run its agent with SagaRunner(...).run()"
        )
    try:
        input = json.loads(ctx.tool_arguments or "{}")
    except ValueError as exc:
        raise InvalidInputError(f"tool {ctx.tool_name!r}: arguments are not JSON: {exc}") from exc
    return run, input, run.slot(ctx.tool_call_id)


def _bound_call(
    fn: Callable[..., Any],
    takes_context: bool,
    ctx: ToolContext[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Callable[[], Any]:
    """The user's function with its arguments bound (the context only if it asked for one)."""
    if takes_context:
        return functools.partial(fn, ctx, *args, **kwargs)
    return functools.partial(fn, *args, **kwargs)


def _refused(run: _SdkRun, exc: SagaError) -> SagaError:
    run.refusal = run.refusal or exc  # the SDK would hand it to the model as text: the runner raises it
    return exc


def _ask_for_context(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> None:
    """Give ``wrapper`` a leading ``ctx: ToolContext`` parameter ahead of ``fn``'s own.

    The SDK hands a ToolContext only to a function whose first parameter asks for one."""
    signature = inspect.signature(fn)
    ctx_param = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ToolContext)
    wrapper.__signature__ = signature.replace(parameters=[ctx_param, *signature.parameters.values()])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {"ctx": ToolContext, **getattr(fn, "__annotations__", {})}


def saga_tool(fn: F) -> F:
    """Journal a function tool's calls. Put it under ``@function_tool`` (which then sees the same
    parameters); the tool must run under :class:`SagaRunner`, which knows the run id."""
    takes_context = _takes_context(fn)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def journaled_async(ctx: ToolContext[Any], *args: Any, **kwargs: Any) -> Any:
            run, input, slot = _prepare_call(ctx)
            call = _bound_call(fn, takes_context, ctx, args, kwargs)
            try:
                outcome = await run.journal.acall(ctx.tool_name, input, slot, call, to_jsonable_python)
            except SagaError as exc:
                raise _refused(run, exc) from None
            return outcome.live if outcome.executed else outcome.output

        wrapper: Callable[..., Any] = journaled_async
    else:

        @functools.wraps(fn)
        def journaled(ctx: ToolContext[Any], *args: Any, **kwargs: Any) -> Any:
            run, input, slot = _prepare_call(ctx)
            call = _bound_call(fn, takes_context, ctx, args, kwargs)
            try:
                outcome = run.journal.call(ctx.tool_name, input, slot, call, to_jsonable_python)
            except SagaError as exc:
                raise _refused(run, exc) from None
            return outcome.live if outcome.executed else outcome.output

        wrapper = journaled

    if not takes_context:
        _ask_for_context(wrapper, fn)
    setattr(wrapper, _SAGA_CHECK, _check_of(fn))
    return cast(F, wrapper)


def _check_of(fn: Callable[..., Any]) -> _ArgumentsCheck:
    """Whether the SDK would accept a call's JSON arguments for ``fn``: its own parameter model."""
    model = function_schema(fn).params_pydantic_model

    def check(arguments: str) -> bool:
        try:
            data = json.loads(arguments or "{}")
            if not isinstance(data, dict):
                return False
            model(**data)
        except Exception:  # noqa: BLE001 - whatever the SDK's validation would refuse
            return False
        return True

    return check


# -- the runner -----------------------------------------------------------------------------------


class _SagaHooks(RunHooks[Any]):
    """Numbers each model response's function calls, stops the run at a refusal, and forwards
    every event to the caller's own hooks."""

    def __init__(self, run: _SdkRun, inner: RunHooks[Any] | None) -> None:
        self._run = run
        self._inner = inner

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self._run.note_agent(agent)
        self._run.note_response(response)
        if self._inner is not None:
            await self._inner.on_llm_end(context, agent, response)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        call_id = getattr(context, "tool_call_id", None)
        if isinstance(call_id, str):
            self._run.ended.add(call_id)  # reached @saga_tool first, or was rejected before it
        if self._inner is not None:
            await self._inner.on_tool_end(context, agent, tool, result)
        self._run.raise_refusal()

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("on_") and name not in ("on_llm_end", "on_tool_end"):
            inner = object.__getattribute__(self, "_inner")
            if inner is not None:
                return getattr(inner, name)
        return object.__getattribute__(self, name)


class SagaRunner:
    """``Runner.run`` / ``run_sync`` under a saga run id; ``tools`` maps tool names to their hooks.

    A run that ends without pending approvals ends the saga run ``finished`` (``finish=False`` keeps
    it open); one that stops for approvals stays open for its resume."""

    def __init__(
        self, *, journal: RunJournal, tools: Mapping[str, Tool] | None = None, finish: bool = True
    ) -> None:
        self.journal = journal
        self.tools = check_tools(tools)
        self.finish = finish

    async def run(self, agent: Agent[Any], input: Any, *, run_id: str, **kwargs: Any) -> RunResult:
        journal = AgentJournal(
            check_run_id(run_id),
            journal=self.journal,
            tools=self.tools,
            prompt=input if isinstance(input, str) else "",
        )
        await asyncio.to_thread(journal.refuse_if_condemned)
        run = _SdkRun(journal, _calls_before(input))
        run.note_agent(agent)
        kwargs["hooks"] = _SagaHooks(run, kwargs.get("hooks"))
        token = _RUN.set(run)
        try:
            result = await Runner.run(agent, input, **kwargs)
        except Exception as exc:
            # The SDK wraps an exception from a hook in its own UserError: raise the refusal itself.
            if run.refusal is not None:
                raise run.refusal from exc
            raise
        finally:
            _RUN.reset(token)
        run.raise_refusal()
        if self.finish and not result.interruptions:
            await journal.afinish()
        return result

    def run_sync(self, agent: Agent[Any], input: Any, *, run_id: str, **kwargs: Any) -> RunResult:
        return asyncio.run(self.run(agent, input, run_id=run_id, **kwargs))


__all__ = ["SagaRunner", "saga_tool"]
