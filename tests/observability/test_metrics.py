"""Metrics through OpenTelemetry (rules 70 (no-sdk-no-metrics), 71 (gauges-one-reader)), read with
the SDK's in-memory reader from a real Worker on both engines."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from django.db import transaction
from django.test.utils import override_settings
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from django_ultjobs import job
from django_ultjobs.models import Job, JobStatus, Slot
from django_ultjobs.observability import metrics
from django_ultjobs.runtime.context import JobContext
from django_ultjobs.store import get_store
from django_ultjobs.worker.gauges import GAUGE_SLOT_KEY
from tests.conftest import running_worker, wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@job(name="metered_ok", max_attempts=1)
def metered_ok() -> None:
    return None


@job(name="metered_flaky", takes_context=True, max_attempts=2, backoff=0.0)
def metered_flaky(ctx: JobContext) -> None:
    if ctx.attempt == 1:
        raise ValueError("once")


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


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Every data point collected now, by instrument name."""
    found: dict[str, list[Any]] = defaultdict(list)
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name].extend(metric.data.data_points)
    return found


def by(points_: list[Any], *keys: str, value: str = "value") -> dict[tuple, Any]:
    return {tuple(p.attributes.get(k) for k in keys): getattr(p, value) for p in points_}


def test_counters_and_histograms_from_a_real_worker(alias, reader):
    """The counters and histograms carry job.name, queue and outcome; a retried attempt is
    counted as ``retrying`` (rule 73 (metric-never-fails): only settles that applied are
    counted)."""
    for _ in range(3):
        metered_ok.enqueue()
    metered_flaky.enqueue()
    with running_worker(alias):
        wait_until(lambda: Job.objects.using(alias).filter(
            name__startswith="metered_", status=JobStatus.SUCCEEDED).count() == 4,
            message="four jobs succeeded")
        # The finished counter is recorded once the settle is written, just after the row.
        wait_until(lambda: sum(p.value for p in points(reader)["ultjobs.jobs.finished"]) >= 5,
                   message="five attempts counted")
    found = points(reader)
    assert by(found["ultjobs.jobs.enqueued"], "job.name", "queue") == {
        ("metered_ok", "default"): 3, ("metered_flaky", "default"): 1}
    assert by(found["ultjobs.jobs.finished"], "job.name", "outcome") == {
        ("metered_ok", "succeeded"): 3, ("metered_flaky", "retrying"): 1,
        ("metered_flaky", "succeeded"): 1}
    durations = by(found["ultjobs.job.duration"], "job.name", "outcome", value="count")
    assert durations[("metered_ok", "succeeded")] == 3
    waits = by(found["ultjobs.job.wait"], "job.name", value="count")
    assert waits == {("metered_ok",): 3, ("metered_flaky",): 2}
    assert all(p.min >= 0 for p in found["ultjobs.job.wait"])


def test_a_rolled_back_enqueue_is_not_counted(alias, reader):
    """Rule 73 (metric-never-fails): what was enqueued counts once the transaction commits; a
    rollback queued nothing."""
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        metered_ok.enqueue()
        raise RuntimeError("roll back")
    with transaction.atomic(using=alias):
        metered_ok.bulk_enqueue([(), ()])
    assert by(points(reader)["ultjobs.jobs.enqueued"], "job.name") == {("metered_ok",): 2}


def test_nothing_runs_without_an_sdk(alias):
    """Rule 70 (no-sdk-no-metrics): with no SDK configured, no instrument exists and no worker
    samples gauges."""
    assert metrics.instruments() is None
    with running_worker(alias) as worker:
        metered_ok.enqueue()
        wait_until(lambda: Job.objects.using(alias).filter(
            name="metered_ok", status=JobStatus.SUCCEEDED).exists(), message="ran")
        assert worker.gauges is None


def test_gauges_are_sampled_by_one_worker_at_a_time(alias, reader):
    """Rule 71 (gauges-one-reader): of two workers, one holds the sampler slot and samples; the
    other reads nothing and reports nothing. When the sampler stops, the other takes over.

    The sampler slot lives three intervals: with a short interval a loaded machine that stalls
    the first sampler for as long hands the slot over, as it should. So the interval is long
    (each sampler samples once as it starts, then sleeps) and the test takes each sample itself,
    judging each by what ``sample_once`` answers, never by how many a wait happened to see."""
    store = get_store(alias)
    for _ in range(3):
        metered_ok.using(queue="unserved").enqueue()
    held = store.slot_store.acquire("job:metered_capped", 2, 60.0, "test:1")
    assert held is not None
    with override_settings(ULTJOBS={"DATABASE": alias, "GAUGE_INTERVAL": 60.0}), \
            ExitStack() as second_stack:
        first_cm = running_worker(alias, queues=("default",))
        first = first_cm.__enter__()
        try:
            wait_until(lambda: first.gauges.samples >= 1, message="the first worker samples")
            second = second_stack.enter_context(running_worker(alias, queues=("default",)))
            for _ in range(5):
                assert first.gauges.sample_once()
                assert not second.gauges.sample_once()
            assert second.gauges.samples == 0
            found = points(reader)
            assert by(found["ultjobs.queue.depth"], "queue") == {("unserved",): 3}
            (age,) = found["ultjobs.queue.oldest_age"]
            assert age.attributes == {"queue": "unserved"} and age.value >= 0
            assert by(found["ultjobs.slots.held"], "key") == {("job:metered_capped",): 1}
        finally:
            first_cm.__exit__(None, None, None)
        # The first gave the slot back as it stopped: the second's next sample takes it.
        assert second.gauges.sample_once()
        assert by(points(reader)["ultjobs.queue.depth"], "queue") == {("unserved",): 3}
        # A queue that drains reads 0, not a series that stops.
        Job.objects.using(alias).filter(queue="unserved").delete()
        store.slot_store.release(held)
        assert second.gauges.sample_once()
        assert by(points(reader)["ultjobs.queue.depth"], "queue") == {("unserved",): 0}
        assert by(points(reader)["ultjobs.slots.held"], "key") == {("job:metered_capped",): 0}
    # Stopped, each gave the sampler slot back and withdrew its figures.
    assert not Slot.objects.using(alias).filter(key=GAUGE_SLOT_KEY).exists()
    assert by(points(reader).get("ultjobs.queue.depth", []), "queue") == {}


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "15", True])
def test_a_bad_gauge_interval_is_e050(value):
    from django_ultjobs.checks import check_settings

    with override_settings(ULTJOBS={"GAUGE_INTERVAL": value}):
        ids = [m.id for m in check_settings()]
    assert "django_ultjobs.E050" in ids


def test_a_brisk_gauge_interval_is_w050_and_the_default_is_quiet():
    from django_ultjobs.checks import check_settings

    with override_settings(ULTJOBS={"GAUGE_INTERVAL": 0.2}):
        assert "django_ultjobs.W050" in [m.id for m in check_settings()]
    ids = [m.id for m in check_settings()]
    assert "django_ultjobs.E050" not in ids and "django_ultjobs.W050" not in ids


def test_a_worker_with_metrics_on_refuses_a_bad_gauge_interval(alias, reader):
    from django_ultjobs.exceptions import JobConfigurationError
    from django_ultjobs.worker.options import WorkerOptions
    from django_ultjobs.worker.worker import WorkerProcess

    with override_settings(ULTJOBS={"DATABASE": alias, "GAUGE_INTERVAL": 0}), \
            pytest.raises(JobConfigurationError, match="GAUGE_INTERVAL"):
        WorkerProcess(WorkerOptions(database=alias)).check()


def test_an_sdk_that_raises_never_fails_a_run(alias, reader, monkeypatch, caplog):
    """Rule 73 (metric-never-fails): the instruments raising on every call leave runs and enqueues
    as they were, with one log line for the whole process."""

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("exporter broke")

    inst = metrics.instruments()
    for instrument in (inst.enqueued, inst.finished, inst.duration, inst.wait):
        monkeypatch.setattr(instrument, "add" if hasattr(instrument, "add") else "record", boom)
    monkeypatch.setattr(metrics, "_failed_once", False)
    rows = [metered_ok.enqueue() for _ in range(3)] + [metered_flaky.enqueue()]
    with running_worker(alias):
        wait_until(lambda: Job.objects.using(alias).filter(
            pk__in=[r.id for r in rows], status=JobStatus.SUCCEEDED).count() == 4,
            message="every job succeeded")
    failures = [r for r in caplog.records
                if getattr(r, "ultjobs_event", None) == "jobs.metrics.record-failed"]
    assert len(failures) == 1 and "exporter broke" in failures[0].ultjobs["error"]


@pytest.mark.django_db(transaction=True, databases="__all__",
                       available_apps=["django_ultjobs", "tests.testapp"])
def test_a_periodic_tick_is_counted_once_by_the_worker_that_enqueued_it(alias, reader, clock):
    """Two schedulers send the same tick; the one whose insert took it counts it."""
    from django.conf import settings

    from django_ultjobs.testing import unregister
    from django_ultjobs.worker.scheduler import Scheduler

    clock.now = clock.now.replace(second=10, microsecond=0)
    with override_settings(ULTJOBS={**settings.ULTJOBS, "DATABASE": alias,
                                    "PRUNE_SCHEDULE": None}):
        @job(name="metered_minutely", every=60)
        def metered_minutely() -> None: ...

        try:
            pair = [Scheduler(store=get_store(alias, clock=clock), worker_id=w, clock=clock)
                    for w in ("a", "b")]
            for scheduler in pair:
                scheduler.step()
            clock.advance(51)
            for scheduler in pair:
                scheduler.step()
        finally:
            unregister("metered_minutely")
    assert Job.objects.using(alias).filter(name="metered_minutely").count() == 1
    assert by(points(reader)["ultjobs.jobs.enqueued"], "job.name") == {
        ("metered_minutely",): 1}
