"""Spans as the tests read them, whichever process exported them.

In the test's own process the SDK's ``InMemorySpanExporter`` holds them; a child process (a run recorded
elsewhere, a Celery worker's pool child) exports with the SDK's ``ConsoleSpanExporter`` into a file of
its own, one JSON span a line. Both read back as ``Seen``, so a link can be resolved across them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)


@dataclass(frozen=True)
class Seen:
    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    status: str  # UNSET, OK, ERROR
    description: str | None
    attributes: dict[str, Any]
    links: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)
    service: str = ""
    start: int = 0  # ns since the epoch
    end: int = 0

    @property
    def ids(self) -> tuple[int, int]:
        return self.trace_id, self.span_id


def of(span: ReadableSpan) -> Seen:
    ctx = span.get_span_context()
    assert ctx is not None
    return Seen(
        name=span.name,
        trace_id=ctx.trace_id,
        span_id=ctx.span_id,
        parent_id=None if span.parent is None else span.parent.span_id,
        status=span.status.status_code.name,
        description=span.status.description,
        attributes=dict(span.attributes or {}),
        links=[
            (link.context.trace_id, link.context.span_id, dict(link.attributes or {})) for link in span.links
        ],
        service=str(span.resource.attributes.get("service.name", "")),
        start=span.start_time or 0,
        end=span.end_time or 0,
    )


def _iso_ns(text: str) -> int:
    from datetime import datetime

    whole, _, frac = text.rstrip("Z").partition(".")
    seconds = datetime.fromisoformat(whole + "+00:00").timestamp()
    return int(seconds) * 1_000_000_000 + int((frac or "0").ljust(9, "0")[:9])


def parse(line: str) -> Seen:
    data = json.loads(line)
    links = [
        (
            int(link["context"]["trace_id"], 16),
            int(link["context"]["span_id"], 16),
            link.get("attributes") or {},
        )
        for link in data.get("links") or []
    ]
    return Seen(
        name=data["name"],
        trace_id=int(data["context"]["trace_id"], 16),
        span_id=int(data["context"]["span_id"], 16),
        parent_id=None if data["parent_id"] is None else int(data["parent_id"], 16),
        status=data["status"]["status_code"],
        description=data["status"].get("description"),
        attributes=data.get("attributes") or {},
        links=links,
        service=str(data["resource"]["attributes"].get("service.name", "")),
        start=_iso_ns(data["start_time"]),
        end=_iso_ns(data["end_time"]),
    )


def read_dir(folder: Path) -> list[Seen]:
    """Every span exported into ``folder`` (one file per process)."""
    return [
        parse(line)
        for path in sorted(folder.glob("spans-*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def export_to_dir(folder: str, service: str) -> TracerProvider:
    """This process's global tracer provider, exporting each span as it ends into ``folder``."""
    out = open(Path(folder) / f"spans-{os.getpid()}.jsonl", "a", buffering=1)  # noqa: SIM115 - the process's life
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


def named(spans: list[Seen], prefix: str) -> list[Seen]:
    return [s for s in spans if s.name.startswith(prefix)]


class BrokenTracing(SpanProcessor, SpanExporter):
    """A span processor that raises when a span starts or ends, and an exporter that raises on export,
    each only while ``fails`` names it (``"start"``, ``"end"``, ``"export"``): the SDK calls processors
    without catching what they raise."""

    fails: str | None = None

    def _maybe(self, where: str) -> None:
        if self.fails == where:
            raise RuntimeError(f"the span processor broke on {where}")

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        self._maybe("start")

    def on_end(self, span: ReadableSpan) -> None:
        self._maybe("end")

    def export(self, spans: Any) -> SpanExportResult:
        self._maybe("export")
        return SpanExportResult.SUCCESS
