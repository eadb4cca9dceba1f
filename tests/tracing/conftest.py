"""One SDK tracer provider for the test process (OpenTelemetry allows one global provider per
process), exporting into an ``InMemorySpanExporter`` that each test starts empty."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .spans import Seen, of

_EXPORTER = InMemorySpanExporter()


def _install() -> None:
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return
    provider = TracerProvider(resource=Resource.create({"service.name": "saga-tests"}))
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)


class Spans:
    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def all(self) -> list[Seen]:
        return [of(s) for s in self.exporter.get_finished_spans()]

    def named(self, prefix: str) -> list[Seen]:
        return [s for s in self.all() if s.name.startswith(prefix)]

    def one(self, prefix: str) -> Seen:
        found = self.named(prefix)
        assert len(found) == 1, [s.name for s in self.all()]
        return found[0]

    def clear(self) -> None:
        self.exporter.clear()


@pytest.fixture
def spans() -> Iterator[Spans]:
    _install()
    _EXPORTER.clear()
    yield Spans(_EXPORTER)
    _EXPORTER.clear()
