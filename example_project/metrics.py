"""Optional metrics for the example: on only when ``OTEL_METRICS_EXPORTER=prometheus``.

The package records its metrics through the OpenTelemetry API (docs/operations.md); this
configures the SDK with the Prometheus exporter package's reader, so each process serves its
figures in Prometheus's text format, written by ``prometheus_client``:

* the web process on ``/metrics`` (``metrics_view`` below, in example_project/urls.py): what it
  enqueued;
* each ``runjobworker`` on ``http://<host>:$ULTJOBS_METRICS_PORT/metrics`` (default 9464, the
  exporter's usual port): what it ran, and the queue and slot gauges while it is the fleet's
  sampler.

Unset, nothing here is imported beyond this module and metrics cost nothing. Installed by
``pip install -e '.[example]'`` (opentelemetry-exporter-prometheus).
"""

from __future__ import annotations

import logging
import os
import sys

from django.http import HttpRequest, HttpResponse

logger = logging.getLogger(__name__)

_configured = False


def setup_metrics() -> bool:
    """Configure the SDK with a Prometheus reader if ``OTEL_METRICS_EXPORTER`` asks; return if
    on. A worker process also starts its own scrape endpoint."""
    global _configured
    if _configured:
        return True
    from django.conf import settings

    exporter = str(getattr(settings, "OTEL_METRICS_EXPORTER", "") or "").strip().lower()
    if exporter != "prometheus":
        if exporter not in {"", "none"}:
            logger.warning("OTEL_METRICS_EXPORTER=%r is not supported by the example (use "
                           "prometheus); metrics stay off", exporter)
        return False
    from opentelemetry import metrics
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource

    service = os.environ.get("OTEL_SERVICE_NAME", "example_project")
    metrics.set_meter_provider(MeterProvider(
        resource=Resource.create({"service.name": service}),
        metric_readers=[PrometheusMetricReader()]))
    if "runjobworker" in sys.argv[1:2]:
        from prometheus_client import start_http_server

        port = int(os.environ.get("ULTJOBS_METRICS_PORT", "9464"))
        start_http_server(port)
        logger.info("metrics on http://0.0.0.0:%s/metrics", port)
    _configured = True
    return True


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: this web process's metrics in Prometheus's text format; 404 when
    metrics are off."""
    if not _configured:
        return HttpResponse("metrics are off: set OTEL_METRICS_EXPORTER=prometheus\n",
                            status=404, content_type="text/plain")
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
