"""``ultjobs.batches.finished`` (docs/operations.md): batches whose last member finished for
good, by outcome, counted once in the transaction that finished it; and every instrument the
package makes is in docs/operations.md's table."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from django_ultjobs import Batch
from django_ultjobs.observability import metrics
from django_ultjobs.testing import run_jobs
from tests.conftest import REPO
from tests.observability.test_metrics import by, points
from tests.testapp.jobs import wf_step

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics.use_meter_provider(provider)
    try:
        yield reader
    finally:
        metrics.use_meter_provider(None)
        provider.shutdown()


def finished(reader: InMemoryMetricReader) -> dict[tuple, int]:
    return by(points(reader).get("ultjobs.batches.finished", []), "outcome")


def test_batches_finished_are_counted_once_by_outcome(alias: str, reader) -> None:
    with Batch(on_finish=wf_step.call("report")):
        for i in range(3):
            wf_step.enqueue(f"ok{i}")
    with Batch(on_success=wf_step.call("report")):
        wf_step.enqueue("ok")
        wf_step.enqueue("bad", fail=True)
    with Batch():  # no callback: no counter kept, not counted
        wf_step.enqueue("alone")
    # One settle per run: only the settle of a batch's last member finishes it.
    run_jobs(database=alias)
    assert finished(reader) == {("succeeded",): 1, ("failed",): 1}


def test_a_batch_cancelled_from_the_admins_operation_is_counted_failed(alias: str,
                                                                      reader) -> None:
    from django_ultjobs.operations import cancel_jobs

    with Batch(on_failure=wf_step.call("alert")) as batch:
        wf_step.enqueue("a")
        wf_step.enqueue("b")
    cancel_jobs(batch)
    assert finished(reader) == {("failed",): 1}


def test_nothing_is_read_without_an_sdk(alias: str) -> None:
    # rule 70 (no-sdk-no-metrics)
    from django_ultjobs.store import batch_outcomes, get_store

    with Batch(on_finish=wf_step.call("report")):
        job = wf_step.enqueue("m")
    store = get_store(alias)
    with store.cursor() as cur, CaptureQueriesContext(connections[alias]) as seen:
        batch_outcomes.count_finished(store, cur, [job.id])
    assert len(seen) == 0


def test_every_instrument_is_in_the_operations_table() -> None:
    made = set(re.findall(r'"(ultjobs\.[a-z_.]+)"',
                          (REPO / "django_ultjobs/observability/metrics.py").read_text()))
    table = (REPO / "docs/operations.md").read_text().split("### The instruments", 1)[1]
    assert made and {name for name in made if f"| `{name}` |" not in table} == set()
