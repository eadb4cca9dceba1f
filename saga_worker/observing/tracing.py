"""OpenTelemetry spans for runs, calls, unwinds and steps (docs/guides/tracing.md).

Through the OpenTelemetry API alone (the extra ``saga-worker[otel]``): the app's SDK, exporter and
sampler decide where the spans go. Without the API installed every function here hands back a no-op
(``NO_SPAN``) and the journal stores no trace context: everything works as it did before tracing. With
the API and no SDK set, no span is built (``_idle``).

The link that ties an undo to its effect: the execute span's context is journaled with the call's
outcome (``exec_traceparent``, W3C ``traceparent``), and the compensate span that undoes it, in any
process, days later, carries a span link to it. A run's first span is journaled with the run
(``traceparent``) and every later span of the run that starts elsewhere (a resumed run, a forward
task's block) links to it. Spans are children of whatever span is current (on a worker: Celery's task
span, when the app uses opentelemetry-instrumentation-celery).

No input, output or secret goes into an attribute unless ``SAGA_TRACE_VALUES`` is on (and then values
under keys named like secrets, ``SAGA_REDACT_KEYS``, still read ``***``).

Nothing here raises into the run or unwind it traces: the SDK calls the app's span processors when a
span starts and ends without catching what they raise, so every touch of a span goes through
``harmless`` / ``quietly`` (observing.py): the error is logged once, the span is dropped or left
as it is, and the work goes on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, TypeVar

from ..core.keys import canonical_json
from ..core.redact import redact_secrets, redact_text
from ..settings import get_settings
from .guard import failed, harmless, quietly

try:  # the optional extra: saga-worker[otel]
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel
    from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER
    from opentelemetry.trace import Link, SpanContext, Status, StatusCode, TraceFlags
except ImportError:  # pragma: no cover - exercised by the tests that block the import
    otel = None  # type: ignore[assignment]

# What the spans read of the values they describe, as protocols: tracing sits below the modules whose
# values it observes (runs, calls, compensation, the journal's records), so it names none of them.


class CallIdentity(Protocol):
    """What a recover span names a call by (``tools.CallOptions``)."""

    @property
    def run_id(self) -> str: ...
    @property
    def tool_call_id(self) -> str: ...
    @property
    def idempotency_key(self) -> str: ...


class CallRecord(Protocol):
    """What execute and compensate spans read of a call's journal record (``ToolRecord``)."""

    @property
    def run_id(self) -> str: ...
    @property
    def origin_run_id(self) -> str: ...
    @property
    def suffix(self) -> str: ...
    @property
    def tool_name(self) -> str: ...
    @property
    def tool_call_id(self) -> str: ...
    @property
    def attempts(self) -> int: ...
    @property
    def input(self) -> Any: ...
    @property
    def status(self) -> Any: ...
    @property
    def exec_traceparent(self) -> str | None: ...


class RunTrace(Protocol):
    """What a run span reads of the run's row (``RunInfo``): where its trace began."""

    @property
    def traceparent(self) -> str | None: ...


class CallEvent(Protocol):
    """What run and execute spans read of a run's event (``RunEvent``)."""

    @property
    def kind(self) -> str: ...
    @property
    def outcome(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def output(self) -> Any: ...
    @property
    def result(self) -> Any: ...


class StepVerdict(Protocol):
    """What a compensate span reads of a step's outcome (``CompensationEntry``)."""

    @property
    def suffix(self) -> str: ...
    @property
    def status(self) -> Any: ...
    @property
    def attempts(self) -> int: ...
    @property
    def needs_approval(self) -> bool: ...
    @property
    def error(self) -> str | None: ...


class UnwindReport(Protocol):
    """What an unwind span reads of its report (``CompensationReport``)."""

    @property
    def complete(self) -> bool: ...
    @property
    def condemned(self) -> bool: ...
    @property
    def entries(self) -> Sequence[StepVerdict]: ...
    def counts(self) -> Mapping[str, int]: ...


E = TypeVar("E", bound=CallEvent)

ENABLED = otel is not None
TRACER_NAME = "saga_worker"
# Attribute values are bounded: a span is not a place for a large document.
VALUE_MAX = 4096
# The kind of each link saga-worker puts on a span (attribute ``saga.link.type``).
LINK_COMPENSATES = "compensates"  # a compensate span -> the execute span of the effect it undoes
LINK_CONTINUES = "continues"  # a later span of a run (resumed, a forward task) -> the run's first span

_tracer: Any = None


def tracer() -> Any:
    """saga-worker's tracer (the global provider's: set it before or after importing saga_worker)."""
    global _tracer
    if _tracer is None:
        from ..version import __version__

        _tracer = otel.get_tracer(TRACER_NAME, __version__)
    return _tracer


def _idle() -> bool:
    """No API, or no SDK behind it yet (the API's proxy or no-op provider): every span would be the
    no-op's, so the call sites skip building them (bench/tracing.py measures what is left).

    Called at every span site (an unwind's and each of its steps'), so it reads the global provider
    where the API keeps it: until one is set, ``get_tracer_provider()`` looks the environment up for
    ``OTEL_PYTHON_TRACER_PROVIDER`` on every call. That variable is read once per process here, at
    the first span site, as a provider set by code (``set_tracer_provider``, at any time) is read on
    every call."""
    global _live, _environment_read
    if _live:
        return False
    if otel is None:
        return True
    if _PROVIDER_KEPT and otel._TRACER_PROVIDER is None:
        if _environment_read:
            return True
        _environment_read = True
        if OTEL_PYTHON_TRACER_PROVIDER not in os.environ:
            return True
    # A global provider, once set, is never replaced: seen once, it is there for good.
    _live = not isinstance(otel.get_tracer_provider(), (otel.ProxyTracerProvider, otel.NoOpTracerProvider))
    return not _live


_live = False
_environment_read = False
# Where the API keeps the global provider (None until one is set); another version that keeps it
# elsewhere is asked through ``get_tracer_provider()`` on every call, as before.
_PROVIDER_KEPT = otel is not None and hasattr(otel, "_TRACER_PROVIDER")


# -- trace context as journaled ------------------------------------------------------------------


def traceparent_of(span: Any) -> str | None:
    """The span's context as a W3C ``traceparent``, if it is worth journaling (valid and sampled)."""
    if span is None:
        return None
    ctx = span.get_span_context()
    if not ctx.is_valid or not ctx.trace_flags.sampled:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def parse_traceparent(value: str | None) -> tuple[int, int, int] | None:
    """``(trace_id, span_id, flags)`` of a journaled ``traceparent``; None for none or a malformed one
    (a journal row is never trusted to be well formed: a bad one just means no link)."""
    if not value:
        return None
    parts = value.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16 or len(parts[3]) != 2:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    if trace_id == 0 or span_id == 0:
        return None
    return trace_id, span_id, flags


def _links(traceparent: str | None, kind: str) -> list[Any] | None:
    parsed = parse_traceparent(traceparent)
    if parsed is None:
        return None
    trace_id, span_id, flags = parsed
    ctx = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))
    return [Link(ctx, {"saga.link.type": kind})]


@harmless("reading the current span for a log line")
def current_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids (hex), for log records; None outside any span."""
    if otel is None:
        return None
    ctx = otel.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


# -- spans ---------------------------------------------------------------------------------------


class _NoSpan:
    """What every function hands back without the API: enters, records nothing, journals nothing."""

    traceparent: str | None = None
    span: Any = None

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def context(self) -> Any:
        return None

    def outcome(self, event: CallEvent) -> None:
        return None

    def verdict(self, entry: StepVerdict | None) -> None:
        return None

    def answer(self, answer: object) -> None:
        return None

    def worklist(self, steps: int) -> None:
        return None

    def report(self, report: UnwindReport) -> None:
        return None


NO_SPAN: Any = _NoSpan()


class Span(_NoSpan):
    """A started span: current while entered, ended on exit; an exception leaving it is recorded."""

    def __init__(self, span: Any) -> None:
        self.span = span
        self.traceparent = None
        with quietly("reading a span's context"):
            self.traceparent = traceparent_of(span)
        self._token: Any = None

    def __enter__(self) -> Span:
        with quietly("making a span current"):
            self._token = otel_context.attach(otel.set_span_in_context(self.span))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None and not isinstance(exc, GeneratorExit):
            self.fail(exc)
        if self._token is not None:
            with quietly("making a span current"):
                otel_context.detach(self._token)
        self.end()

    @harmless("ending a span")
    def end(self) -> None:
        self.span.end()

    @harmless("parenting a span")
    def context(self) -> Any:
        return otel.set_span_in_context(self.span)

    @property
    @harmless("reading a span", default=False)
    def recording(self) -> bool:
        return bool(self.span.is_recording())

    @harmless("setting a span's attribute")
    def set(self, key: str, value: Any) -> None:
        if value is not None:
            self.span.set_attribute(key, value)

    @harmless("setting a span's status")
    def error(self, text: str | None, kind: str) -> None:
        """The span ends in error: its status, ``error.type`` (semantic conventions)."""
        self.span.set_attribute("error.type", kind)
        self.span.set_status(Status(StatusCode.ERROR, _bounded(redact_text(text or kind))))

    @harmless("recording an exception on a span")
    def fail(self, exc: BaseException) -> None:
        if self.recording:
            self.span.record_exception(exc)
            self.error(f"{type(exc).__name__}: {exc}", type(exc).__qualname__)

    # -- what each kind of span learns at its end ----------------------------------------------
    @harmless("tracing a call's outcome")
    def outcome(self, event: CallEvent) -> None:
        """A call's end (execute spans): how it settled, its error, its output if values are on."""
        if not self.recording:
            return
        self.set("saga.call.outcome", event.outcome)
        if event.error is not None:
            self.error(event.error, _error_type(event.error))
        elif event.output is not None and get_settings().trace_values:
            self.set("gen_ai.tool.call.result", _value(event.output))

    @harmless("tracing a step's verdict")
    def verdict(self, entry: StepVerdict | None) -> None:
        """A step's end (compensate spans): its status, attempts, error; a stood-down twin says so."""
        if not self.recording:
            return
        if entry is None:
            self.set("saga.compensation.status", "stood-down")
            return
        self.set("saga.compensation.status", entry.status.value)
        self.set("saga.compensation.attempts", entry.attempts)
        if entry.needs_approval:
            self.set("saga.compensation.needs_approval", True)
        if entry.error is not None:
            self.set("saga.compensation.error", _bounded(redact_text(entry.error)))
            if entry.status.value == "failed":
                self.error(entry.error, _error_type(entry.error))

    @harmless("tracing recover's answer")
    def answer(self, answer: object) -> None:
        """``recover``'s answer (recover spans): done or not; a refusal is the span's error."""
        if not self.recording:
            return
        done = getattr(answer, "done", None)
        if done is None:
            self.error(getattr(answer, "reason", None), "recover_refused")
            return
        self.set("saga.recover.done", bool(done))

    @harmless("tracing an unwind's worklist")
    def worklist(self, steps: int) -> None:
        if self.recording:
            self.set("saga.unwind.steps", steps)

    @harmless("tracing an unwind's report")
    def report(self, report: UnwindReport) -> None:
        """An unwind's end (unwind spans): its counts by status, whether it is complete, where it halted."""
        if not self.recording:
            return
        for status, count in sorted(report.counts().items()):
            self.set(f"saga.unwind.count.{status}", count)
        self.set("saga.unwind.complete", report.complete)
        self.set("saga.unwind.condemned", report.condemned)
        halted = next((e for e in report.entries if e.status.value in _HALTING), None)
        if halted is not None:
            self.set("saga.unwind.halted_at", halted.suffix)
            self.set("saga.unwind.halted_status", halted.status.value)
        failed = [e for e in report.entries if e.status.value == "failed"]
        if failed:
            self.error(f"step {failed[0].suffix} failed: {failed[0].error}", "compensation_failed")


_HALTING = ("failed", "busy", "awaiting-approval")


def _start(
    name: str, attributes: dict[str, Any], *, parent: Any = None, links: list[Any] | None = None
) -> Any:
    """A started ``Span``; ``NO_SPAN`` for the API's no-op tracer (no SDK), whose span is invalid:
    nothing to record, journal or make current."""
    try:
        span = tracer().start_span(
            name,
            context=parent,
            attributes={k: v for k, v in attributes.items() if v is not None},
            links=links,
        )
        if not span.is_recording() and not span.get_span_context().is_valid:
            return NO_SPAN
    except Exception:  # noqa: BLE001 - a processor that raises on start: the work goes on untraced
        failed("starting a span")
        return NO_SPAN
    return Span(span)


def _bounded(text: str) -> str:
    return text if len(text) <= VALUE_MAX else text[: VALUE_MAX - 1] + "…"


def _value(value: Any) -> str:
    """An input or output as an attribute (opted in): canonical JSON, secrets hidden, bounded."""
    try:
        text = canonical_json(redact_secrets(value, get_settings().secret_keys()))
    except Exception:  # noqa: BLE001 - a value that cannot be shown is not the span's problem
        text = f"<{type(value).__name__}>"
    return _bounded(text)


def _error_type(error: str) -> str:
    """``error.type`` from saga-worker's error text (``"Type: message"``): the exception's type."""
    head = error.split(":", 1)[0].strip()
    return head if head and head.replace(".", "").replace("_", "").isalnum() else "error"


# -- the call sites --------------------------------------------------------------------------------


def traced_run(loop: Any, run: RunTrace | None, events: Iterator[E], entry: str) -> Iterator[E]:
    """A run's events under its ``saga.run`` span (``entry``: how it was driven); the events as they
    are, untouched, without the API."""
    if _idle():
        return events
    return _traced_run(loop, run, events, entry)


def _traced_run(loop: Any, run: RunTrace | None, events: Iterator[E], entry: str) -> Iterator[E]:
    # Not made current: a generator's consumer runs between its yields, in its own context. The run's
    # calls are parented on it explicitly (``loop.trace``).
    span = _start(
        "saga.run",
        {"saga.run.id": loop.run_id, "saga.run.entry": entry},
        links=_links(None if run is None else run.traceparent, LINK_CONTINUES),
    )
    if span is NO_SPAN:
        yield from events
        return
    loop.trace = span
    try:
        for event in events:
            if event.kind == "end" and event.result is not None and span.recording:
                span.set("saga.run.status", event.result.status)
                if event.result.error is not None:
                    span.error(event.result.error, "run_failed")
            yield event
    except GeneratorExit:
        raise
    except BaseException as exc:
        span.fail(exc)
        raise
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
        span.end()


def block(run: Any) -> Any:
    """A ``saga()`` block's ``saga.run`` span (current while the block runs, so the app's own spans and
    its calls' nest under it): linked to the run's first span when the run began elsewhere."""
    if _idle():
        return NO_SPAN
    prior = run._run
    span = _start(
        "saga.run",
        {"saga.run.id": run.run_id, "saga.run.entry": "saga"},
        links=_links(None if prior is None else prior.traceparent, LINK_CONTINUES),
    )
    run.calls.trace = span
    return span


def execute(parent: Any, record: CallRecord, key: str) -> Any:
    """A call's ``execute_tool {tool}`` span (GenAI semantic conventions for tool execution), current
    while ``execute`` runs; its ``traceparent`` is journaled with the outcome."""
    if _idle():
        return NO_SPAN
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": record.tool_name,
        "gen_ai.tool.call.id": record.tool_call_id,
        "saga.run.id": record.run_id,
        "saga.call.suffix": record.suffix,
        "saga.call.key": key,
        "saga.call.attempt": record.attempts,
    }
    if get_settings().trace_values:
        attributes["gen_ai.tool.call.arguments"] = _value(record.input)
    return _start(f"execute_tool {record.tool_name}", attributes, parent=parent.context())


def compensate(run_id: str, record: CallRecord, key: str, *, dry_run: bool) -> Any:
    """A step's ``saga.compensate {tool}`` span, linked to the execute span of the effect it undoes."""
    if _idle():
        return NO_SPAN
    attributes = {
        "gen_ai.tool.name": record.tool_name,
        "gen_ai.tool.call.id": record.tool_call_id,
        "saga.run.id": run_id,
        "saga.call.suffix": record.suffix,
        "saga.call.origin_run_id": record.origin_run_id if record.origin_run_id != run_id else None,
        "saga.call.record_status": record.status.value,
        "saga.compensation.key": key,
        "saga.dry_run": dry_run or None,
    }
    links = _links(record.exec_traceparent, LINK_COMPENSATES)
    return _start(f"saga.compensate {record.tool_name}", attributes, links=links)


def recover(opts: CallIdentity, tool_name: str | None) -> Any:
    """A ``saga.recover {tool}`` span: the probe of whether an interrupted or failed call took effect."""
    if _idle():
        return NO_SPAN
    attributes = {
        "gen_ai.tool.name": tool_name,
        "gen_ai.tool.call.id": opts.tool_call_id,
        "saga.run.id": opts.run_id,
        "saga.call.key": opts.idempotency_key,
    }
    return _start(f"saga.recover {tool_name or 'tool'}", attributes)


def unwind(
    run_id: str,
    *,
    actor: str,
    via: str,
    dry_run: bool,
    unwind_id: str | None = None,
    name: str = "saga.unwind",
) -> Any:
    """An unwind's span (``saga.unwind``; ``saga.unwind.report`` where a distributed unwind's report is
    assembled): who asked and through what, then its counts by status."""
    if _idle():
        return NO_SPAN
    attributes = {
        "saga.run.id": run_id,
        "saga.unwind.id": unwind_id,
        "saga.unwind.actor": actor,
        "saga.unwind.via": via,
        "saga.dry_run": dry_run,
    }
    return _start(name, attributes)


__all__ = [
    "ENABLED",
    "LINK_COMPENSATES",
    "LINK_CONTINUES",
    "NO_SPAN",
    "TRACER_NAME",
    "block",
    "compensate",
    "current_ids",
    "execute",
    "parse_traceparent",
    "recover",
    "traced_run",
    "traceparent_of",
    "unwind",
]
