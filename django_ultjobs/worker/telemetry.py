"""What a claim's runs report to: the tracer and meter providers, looked up once per claim.

Until a provider is set, the OpenTelemetry API looks its environment variable up on every
``get_tracer_provider()`` and ``get_meter_provider()`` (``OTEL_PYTHON_TRACER_PROVIDER``,
``OTEL_PYTHON_METER_PROVIDER``): a large share of a short run's own Python on a site without an
SDK. A worker looks both up when a claim's runs start,
not in every run, so a provider set while it runs is used from its next claim on.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..observability import metrics
from ..observability.tracing import tracing_enabled


@dataclass(frozen=True, slots=True)
class Telemetry:
    """The providers as one claim's runs see them."""

    #: Whether a tracer provider is installed: without one a run opens no span.
    traced: bool
    #: The meter provider's instruments; None without an SDK, and nothing is recorded
    #: (rule 70 (no-sdk-no-metrics)).
    instruments: metrics.Instruments | None


def telemetry_now() -> Telemetry:
    """The providers as they are set now."""
    return Telemetry(traced=tracing_enabled(), instruments=metrics.instruments())
