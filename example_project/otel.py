"""Optional OpenTelemetry for the example: on only when ``OTEL_TRACES_EXPORTER`` is set.

``OTEL_TRACES_EXPORTER=console python manage.py runserver`` prints every request's span, and a
worker started the same way prints each job's ``job.<name>`` span as a child of the request that
queued it (same trace id). Unset, or ``none``, nothing is imported beyond the API the package
already uses, and tracing costs nothing.

Called from ``ShopConfig.ready()``: that runs once in every process (the WSGI server, ``runserver``,
``runjobworker``, ``demo``) after settings are loaded and before any request handler builds its
middleware chain, which is when ``DjangoInstrumentor`` must add its middleware. Calling it from
settings.py itself would make the instrumentor read ``settings.MIDDLEWARE`` while settings.py is
still being imported.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

_configured = False


def setup_tracing() -> bool:
    """Configure the SDK and instrument Django if ``OTEL_TRACES_EXPORTER`` asks; return if on."""
    global _configured
    if _configured:
        return True
    from django.conf import settings

    # Read through the settings (example_project/settings.py takes it from the environment), so
    # a project that installs the shop app with its own settings, like the package's test suite,
    # is never instrumented behind its back by a variable left in the shell.
    exporter_name = str(getattr(settings, "OTEL_TRACES_EXPORTER", "") or "").strip().lower()
    if not exporter_name or exporter_name == "none":
        return False

    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
        SpanExporter,
    )

    exporter: SpanExporter
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    elif exporter_name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )
        except ImportError:
            logger.warning("OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http;"
                           " tracing stays off")
            return False
        exporter = OTLPSpanExporter()
    else:
        logger.warning("OTEL_TRACES_EXPORTER=%r is not supported by the example (use console or "
                       "otlp); tracing stays off", exporter_name)
        return False

    service = os.environ.get("OTEL_SERVICE_NAME", "example_project")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    # The console exporter writes each span as it ends (readable in a demo); a real collector
    # gets batches.
    processor = (SimpleSpanProcessor(exporter) if exporter_name == "console"
                 else BatchSpanProcessor(exporter))
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)

    from opentelemetry.instrumentation.django import DjangoInstrumentor

    DjangoInstrumentor().instrument()
    _configured = True
    return True
