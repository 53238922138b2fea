"""The example's ``/metrics``: the Prometheus exporter package's text, with the package's
instruments in it (docs/operations.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.test import RequestFactory
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider

from django_ultjobs.observability import metrics
from example_project import metrics as example_metrics
from tests.testapp.jobs import add


@pytest.fixture
def prometheus(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    reader = PrometheusMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics.use_meter_provider(provider)
    monkeypatch.setattr(example_metrics, "_configured", True)
    try:
        yield
    finally:
        metrics.use_meter_provider(None)
        provider.shutdown()  # which takes the reader's collector off REGISTRY


@pytest.mark.django_db(databases="__all__")
def test_metrics_view_serves_the_enqueue_counter(alias, prometheus,
                                                 django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(using=alias, execute=True):
        add.enqueue(1, 2)
    response = example_metrics.metrics_view(RequestFactory().get("/metrics"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    text = response.content.decode()
    assert re.search(r'^ultjobs_jobs_enqueued_total\{job_name="add",[^}]*queue="default"\} 1\.0$',
                     text, re.MULTILINE), text


def test_metrics_view_is_404_while_metrics_are_off():
    response = example_metrics.metrics_view(RequestFactory().get("/metrics"))
    assert response.status_code == 404
