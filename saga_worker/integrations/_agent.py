"""One agent run's side of the journal, shared by the three framework adapters.

Every tool call the framework makes goes through a ``saga()`` block of its own: the framework's
tool function (its "handler") is the ``execute`` hook, so the claim before execute, the replay of a
recorded success, ``recover``/``idempotent`` for an interrupted call and the tombstone gate are the
run machinery's, not a copy of it.

The hard part is naming the call. An LLM's tool-call ids are minted afresh by every model request,
so a re-run (after a crash, a retried model call, a resume from saved history) sees new ids for the
same calls: replay never keys on them. A call is named by what a re-run can compute again:

- by default, its **position**: ``call-N``, N the call's 1-based ordinal among the run's calls that
  reach the journal, in the order of the run's conversation (the framework's message history, calls
  of one model response in the order the model listed them). A call the framework rejects before its
  tool can run (arguments that fail its validation, a tool it does not have) never reaches the
  journal and takes no number, so a re-run whose model no longer makes (or newly makes) such a call
  numbers its other calls as the first run did. The adapters say which calls reach the journal
  (``HistoryCall.reaches``); :func:`slot_of` counts them: one rule for every framework;
- for a tool declared ``idempotency="args"``, its **arguments**: the tool name and the hash of its
  input (the record is ``args-{tool}-{hash16}``), wherever in the run it is asked.

A re-run that asks, at a position the journal already holds, another tool or other arguments gets
``ReplayMismatchError``: nothing is executed and nothing is replayed, since either would be a lie.
And a call is never executed at a position the journal has left free below a call it holds from a
later model response (the run's calls do not line up with the journal's: an earlier numbering, or a
history that says less than the first run knew): that is ``ReplayMismatchError`` too.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.checks import check_run_id, check_tool_name
from ..core.keys import canonical_json, hash16
from ..core.storable import exception_text
from ..errors import CompensatedRunError, InvalidInputError, OutOfLineCallError, ToolFailedError
from ..journal.retention import refuse_stopped
from ..journal.roles import RunJournal
from ..recording.blocks import saga
from ..recording.groups import recorded_as_group
from ..recording.tools import CallOptions, NoEffect, Tool, check_tools
from . import _CURRENT_CALL, _CURRENT_NOTES, said_no_effect
from . import hooks as make_hooks

JsonOf = Callable[[Any], Any]
# The text of an error result (a framework tool that returned its failure instead of raising it), or None.
ErrorOf = Callable[[Any], "str | None"]


class ErrorResult(Exception):  # noqa: N818 - it is what the record's error says the call gave
    """The tool gave an error result (say a ``ToolMessage`` with ``status="error"``): a failed call."""


# Tools the caller gave no hooks for are still journaled: side-effecting, nothing to undo them with.
_NO_HOOKS = make_hooks()


@dataclass(frozen=True)
class Outcome:
    """What one call gave: ``output`` as journaled (JSON); ``live`` is the framework's own return
    value when the call was executed just now (``executed``), so a first run hands the framework
    exactly what its tool returned, and a replay hands it the journaled JSON."""

    output: Any
    executed: bool
    live: Any = None


def _plain_json(value: Any) -> Any:
    return value


def _no_error(value: Any) -> str | None:
    return None


_POSITIONAL = re.compile(r"call-([1-9][0-9]*)")


@dataclass(frozen=True)
class HistoryCall:
    """One tool call in the run's conversation, as an adapter sees it: the framework's id (only to find
    the call in this history; never journaled), and whether it reaches the journal (False: the
    framework rejected it before its tool could run)."""

    id: str
    reaches: bool = True


@dataclass(frozen=True)
class Slot:
    """Where a call stands: its ``position`` (``call-N``) and ``last``, the last position of the model
    response it belongs to (its siblings may be journaled in any order, but nothing past ``last``
    can be journaled before it unless the run's calls and the journal's do not line up)."""

    position: int
    last: int


def slot_of(call_id: str, responses: Sequence[Sequence[HistoryCall]]) -> Slot:
    """The slot of the call whose framework id is ``call_id`` among the run's model responses (each
    the calls it asked, in order): positions count only the calls that reach the journal."""
    found: Slot | None = None
    counted = 0
    for calls in responses:
        first = counted
        counted += sum(1 for c in calls if c.reaches)
        mine = first
        for call in calls:
            if call.reaches:
                mine += 1
            if call.id == call_id:  # the latest: a reused id names the newest call
                found = Slot(mine if call.reaches else 0, counted)
    if found is None:
        raise InvalidInputError(
            f"tool call {call_id!r} is not in the run's message history, so its position cannot be known"
        )
    if found.position == 0:
        raise InvalidInputError(f"tool call {call_id!r} was rejected by its framework: it has no position")
    return found


def turn_group(slot: Slot) -> str:
    """The group of the calls of one model response (docs/reference/compensation.md, "Groups").

    The model asked for them together, without the output of any of them, and the frameworks run them
    side by side: they are independent, so an unwind with ``parallel=True`` may undo them side by
    side. The token is the response's last position, which a re-run computes again, so a call
    journaled after a crash joins its siblings' group."""
    return f"turn-{slot.last}"


class AgentJournal:
    """Routes an agent run's tool calls through the journal as run ``run_id``.

    ``tools`` maps a framework tool name to its saga side (:func:`saga_worker.integrations.hooks`
    or any ``Tool``, whose own ``execute`` is not used: the framework executes)."""

    def __init__(
        self, run_id: str, *, journal: RunJournal, tools: Mapping[str, Tool] | None = None, prompt: str = ""
    ) -> None:
        self.run_id = check_run_id(run_id)
        self.journal = journal
        self.tools = check_tools(tools)
        self.prompt = prompt if isinstance(prompt, str) else ""

    def refuse_if_condemned(self) -> None:
        """Raise ``CompensatedRunError`` before an agent run starts on a condemned run id, and
        ``RunPrunedError`` on a pruned one."""
        refuse_stopped(self.journal.get_run(self.run_id))

    def call_id(self, tool_name: str, input: Any, position: int) -> str:
        """The journal's name for a call: its position, or its arguments for an args-mode tool."""
        if not isinstance(position, int) or isinstance(position, bool) or position < 1:
            raise InvalidInputError(f"tool call position must be a whole number >= 1, got {position!r}")
        if self.tools.get(tool_name, _NO_HOOKS).idempotency == "args":
            return f"{tool_name}.{hash16(input)}"
        return f"call-{position}"

    def call(
        self,
        tool_name: str,
        input: Any,
        slot: Slot,
        execute: Callable[[], Any],
        json_of: JsonOf = _plain_json,
        error_of: ErrorOf = _no_error,
    ) -> Outcome:
        """Settle one call: replay it from the journal, or claim it and run ``execute()`` once.

        An exception from ``execute`` is re-raised as it was (the framework's own control flow, such
        as a retry request, keeps working), after the record says ``failed``. A return value that
        ``error_of`` reads as an error result is a failed call too, handed back as it was. Either is
        journaled with the ``NoEffect`` mark when the tool said so (:func:`no_effect`)."""
        self._check_arguments(tool_name, input)
        call_id = self.call_id(tool_name, input, slot.position)
        self._check_in_line(call_id, tool_name, input, slot)
        box: dict[str, Any] = {}
        tool = self._framework_tool(tool_name, _boxed_execute(tool_name, execute, json_of, error_of, box))
        failed: ToolFailedError | None = None
        # finish=False: an agent run's end is not one call's; the adapter says when the run is over.
        # The calls of one model response are one group (``turn_group``).
        with (
            recorded_as_group(self.run_id, turn_group(slot)),
            saga(
                self.run_id, journal=self.journal, tools={tool_name: tool}, prompt=self.prompt, finish=False
            ) as run,
        ):
            try:
                output = run.call(tool_name, input, id=call_id)
            except ToolFailedError as exc:  # caught inside, so the block does not end the run failed
                failed = exc
        if failed is not None:
            if box.get("error_result"):
                return Outcome(None, True, box.get("live"))  # journaled failed; the framework gets its result
            error = box.get("error")
            if isinstance(error, BaseException):
                raise error
            raise failed
        return Outcome(output, "live" in box, box.get("live"))

    def _check_arguments(self, tool_name: str, input: Any) -> None:
        """Refuse a bad tool name, or arguments that cannot be journaled, before anything is written."""
        check_tool_name(tool_name)
        try:
            canonical_json(input)
        except InvalidInputError as exc:
            raise InvalidInputError(
                f"run {self.run_id!r}: arguments of tool {tool_name!r} are not JSON: {exc}",
                run_id=self.run_id,
                tool_name=tool_name,
            ) from exc

    def _check_in_line(self, call_id: str, tool_name: str, input: Any, slot: Slot) -> None:
        """Refuse a new positional call when the journal holds a call past its model response: the
        run's calls do not line up with the journal's, and executing would put an effect the journal
        may already hold under a new key (a free slot below a journaled call)."""
        if not call_id.startswith("call-") or self.journal.get_record(self.run_id, call_id) is not None:
            return
        beyond = []
        for record in self.journal.list_records(self.run_id):
            match = _POSITIONAL.fullmatch(record.suffix)
            if match is not None and int(match.group(1)) > slot.last:
                beyond.append(record)
        if beyond:
            later = min(beyond, key=lambda r: int(r.suffix[5:]))
            raise OutOfLineCallError(
                self.run_id,
                call_id,
                (tool_name, canonical_json(input)),
                (later.suffix, later.tool_name, canonical_json(later.input)),
            )

    def _framework_tool(self, tool_name: str, execute: Callable[[Any, CallOptions], Any]) -> Tool:
        """The caller's saga side of ``tool_name`` (its hooks), executed by the framework's ``execute``."""
        spec = self.tools.get(tool_name, _NO_HOOKS)
        return Tool(
            execute,
            spec.compensate,
            spec.recover,
            idempotency=spec.idempotency,
            side_effect=spec.side_effect,
            idempotent=spec.idempotent,
            description=spec.description,
        )

    async def acall(
        self,
        tool_name: str,
        input: Any,
        slot: Slot,
        execute: Callable[[], Awaitable[Any]],
        json_of: JsonOf = _plain_json,
        error_of: ErrorOf = _no_error,
    ) -> Outcome:
        """``call`` from the framework's event loop. The journal is written on a worker thread (its
        I/O does not block the loop) and the framework's coroutine is run back on the loop it belongs
        to, so the tool sees its own loop, context variables and task machinery."""
        loop = asyncio.get_running_loop()

        def on_loop() -> Any:
            return asyncio.run_coroutine_threadsafe(_awaited(execute), loop).result()

        return await asyncio.to_thread(self.call, tool_name, input, slot, on_loop, json_of, error_of)

    def finish(self) -> None:
        """End the run ``finished`` (its agent run is over): a later re-run replays, executes nothing.

        A run condemned meanwhile is left as it is: its unwind owns it now."""
        try:
            with saga(self.run_id, journal=self.journal, tools={}, prompt=self.prompt, finish=True):
                pass
        except CompensatedRunError:
            return

    async def afinish(self) -> None:
        await asyncio.to_thread(self.finish)


def _boxed_execute(
    tool_name: str, execute: Callable[[], Any], json_of: JsonOf, error_of: ErrorOf, box: dict[str, Any]
) -> Callable[[Any, CallOptions], Any]:
    """A ``Tool.execute`` hook around the framework's ``execute()``: it journals the JSON of the
    result, and leaves in ``box`` the framework's own return value (``"live"``) or the exception
    it raised (``"error"``), so ``call`` can hand either back to the framework as it was.

    A failure the tool marked with ``no_effect`` is raised to the run machinery as ``NoEffect``, which
    journals it ``failed`` with that mark: an exception that is (or was raised ``from``) a marked
    error, or an error result the framework made from such an exception (``note_reported``). A
    marked error the tool caught and went on from marks nothing: the tool may have acted after it."""

    def run_it(_input: Any, opts: CallOptions) -> Any:
        notes: dict[str, Any] = {}
        token = _CURRENT_CALL.set(opts)
        notes_token = _CURRENT_NOTES.set(notes)
        try:
            live = execute()
        except Exception as exc:  # re-raised to the framework by ``call``, once the record is written
            box["error"] = exc
            if said_no_effect(exc, notes):
                raise NoEffect(exception_text(exc)) from exc
            raise
        except BaseException as exc:
            box["error"] = exc
            raise
        finally:
            _CURRENT_NOTES.reset(notes_token)
            _CURRENT_CALL.reset(token)
        box["live"] = live
        error = error_of(live)
        if error is not None:
            box["error_result"] = True
            reported = notes.get("reported")
            raise NoEffect(error) if said_no_effect(reported, notes) else ErrorResult(error)
        try:
            return json_of(live)
        except Exception as exc:
            raise TypeError(
                f"tool {tool_name!r} returned a {type(live).__name__} that cannot be journaled as JSON: {exc}"
            ) from exc

    return run_it


async def _awaited(execute: Callable[[], Awaitable[Any]]) -> Any:
    return await execute()
