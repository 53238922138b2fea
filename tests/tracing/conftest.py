"""One OpenTelemetry SDK for the tracing tests, inert for every other test in the process.

OpenTelemetry lets a process install its global tracer provider once. The tests need a real SDK
(spans recorded into an ``InMemorySpanExporter``), the rest of the suite runs in the same pytest
process and must behave as if no SDK were installed. So the provider installed here switches:
while a tracing test runs its tracers are the SDK's, otherwise the API's own no-op tracers, which
is exactly what a site without an SDK gets (no span context, nothing injected at enqueue).

The Django instrumentation adds its middleware to ``settings.MIDDLEWARE``; it is switched on only
around the modules that ask for ``instrumented_django`` and removed again after them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

_NOOP_TRACER = trace.NoOpTracer()


class SwitchableTracerProvider(trace.TracerProvider):
    """The process-wide provider: the SDK while ``recording``, the API's no-op otherwise."""

    def __init__(self, sdk: TracerProvider) -> None:
        self.sdk = sdk
        self.recording = False

    def get_tracer(self, instrumenting_module_name: str,
                   instrumenting_library_version: str | None = None,
                   schema_url: str | None = None,
                   attributes: Any = None) -> trace.Tracer:
        real = self.sdk.get_tracer(instrumenting_module_name, instrumenting_library_version,
                                   schema_url, attributes)
        return _SwitchableTracer(self, real)


class _SwitchableTracer(trace.Tracer):
    def __init__(self, switch: SwitchableTracerProvider, real: trace.Tracer) -> None:
        self._switch = switch
        self._real = real

    def _tracer(self) -> trace.Tracer:
        return self._real if self._switch.recording else _NOOP_TRACER

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._tracer().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._tracer().start_as_current_span(*args, **kwargs)


EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="session")
def tracer_provider() -> SwitchableTracerProvider:
    sdk = TracerProvider(resource=Resource.create({"service.name": "ultjobs-tests"}))
    sdk.add_span_processor(SimpleSpanProcessor(EXPORTER))
    provider = SwitchableTracerProvider(sdk)
    trace.set_tracer_provider(provider)
    if trace.get_tracer_provider() is not provider:
        pytest.fail("a TracerProvider was installed in this process before the tracing tests' "
                    f"own ({trace.get_tracer_provider()!r}); OpenTelemetry allows only one")
    return provider


class Spans:
    """The spans finished during one test, with the look-ups the tests need."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self._exporter = exporter

    def all(self) -> list[ReadableSpan]:
        return sorted(self._exporter.get_finished_spans(), key=lambda s: s.start_time or 0)

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.all() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {self.all()}"
        return found[0]

    def of_job(self, job_id: int) -> list[ReadableSpan]:
        """The ``job.<name>`` spans of one job, one per run, in the order they started."""
        return [s for s in self.all() if s.kind == SpanKind.CONSUMER
                and (s.attributes or {}).get("job.id") == job_id]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        return [s for s in self.all() if s.parent is not None
                and s.parent.span_id == parent.context.span_id]

    def clear(self) -> None:
        self._exporter.clear()


@pytest.fixture(autouse=True)
def spans(tracer_provider: SwitchableTracerProvider) -> Iterator[Spans]:
    EXPORTER.clear()
    tracer_provider.recording = True
    try:
        yield Spans(EXPORTER)
    finally:
        tracer_provider.recording = False
        EXPORTER.clear()


@pytest.fixture(scope="module")
def instrumented_django(tracer_provider: SwitchableTracerProvider) -> Iterator[None]:
    """``DjangoInstrumentor`` on for one module: each request is a SERVER span.

    Module-scoped, so it is set up before any function fixture's ``override_settings`` (a
    MIDDLEWARE change made inside one would be undone with it). Test clients built afterwards
    load the middleware; the ones other modules build after the teardown do not.
    """
    from django.conf import settings
    from opentelemetry.instrumentation.django import DjangoInstrumentor

    instrumentor = DjangoInstrumentor()
    mine = not instrumentor.is_instrumented_by_opentelemetry
    if mine:
        instrumentor.instrument()
    assert DjangoInstrumentor._opentelemetry_middleware in settings.MIDDLEWARE
    try:
        yield
    finally:
        if mine:
            instrumentor.uninstrument()
            assert DjangoInstrumentor._opentelemetry_middleware not in settings.MIDDLEWARE


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    """``(trace id, span id)`` of a span as the W3C header writes them."""
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def is_root(span: ReadableSpan) -> bool:
    return span.parent is None


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def event_names(span: ReadableSpan) -> Sequence[str]:
    return [e.name for e in span.events]
