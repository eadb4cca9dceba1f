"""One SDK tracer provider for the test process (OpenTelemetry allows one global provider per
process), exporting into an ``InMemorySpanExporter`` that each test starts empty. It samples only
while a test of this folder runs: the rest of the session (in any order) records nothing. Behind it,
a span processor and an exporter that raise when a test asks them to (``broken_tracing``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from .spans import BrokenTracing, Seen, of

_EXPORTER = InMemorySpanExporter()


class _WhileTesting(Sampler):
    """Record and sample while a tracing test runs; drop every span at any other time."""

    active = False

    def should_sample(
        self,
        parent_context: Any,
        trace_id: int,
        name: str,
        kind: Any = None,
        attributes: Any = None,
        links: Any = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        if not self.active:
            return SamplingResult(Decision.DROP)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "while a tests/tracing test runs"


_SAMPLER = _WhileTesting()


_BROKEN = BrokenTracing()


def _install() -> None:
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return
    provider = TracerProvider(resource=Resource.create({"service.name": "saga-tests"}), sampler=_SAMPLER)
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    provider.add_span_processor(_BROKEN)
    provider.add_span_processor(SimpleSpanProcessor(_BROKEN))
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
    _SAMPLER.active = True
    try:
        yield Spans(_EXPORTER)
    finally:
        _SAMPLER.active = False
        _EXPORTER.clear()


@pytest.fixture
def broken_tracing(spans: Spans) -> Iterator[BrokenTracing]:
    """Spans recorded as ``spans`` records them, through a processor and exporter that raise where the
    test sets ``fails``; mended after the test."""
    try:
        yield _BROKEN
    finally:
        _BROKEN.fails = None
