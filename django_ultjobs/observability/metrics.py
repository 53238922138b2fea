"""Metrics through the OpenTelemetry API: what was enqueued, how runs ended, how long they took.

Only ``opentelemetry-api`` is used here. With no SDK configured (no meter provider set) nothing
is created and nothing is recorded: every ``record_*`` below returns after one check
(rule 70 (no-sdk-no-metrics)).

The instruments (docs/operations.md):

* ``ultjobs.jobs.enqueued`` counter, ``job.name`` and ``queue``: jobs whose enqueue committed;
* ``ultjobs.jobs.finished`` counter, ``job.name``, ``queue`` and ``outcome``: attempts whose
  outcome the worker wrote (a stale settle is not counted, rule 4 (fenced-settle));
* ``ultjobs.job.duration`` histogram (s): how long a body ran, same attributes;
* ``ultjobs.job.wait`` histogram (s): from the moment a job was due (enqueued, or scheduled,
  or its retry's backoff over) to its start;
* ``ultjobs.batches.finished`` counter, ``outcome`` (``succeeded``: every member succeeded;
  ``failed``: one at least did not): batches whose last member finished for good, counted in
  the transaction that finished it (``store/batch_outcomes.py``; batches with a callback);
* ``ultjobs.queue.depth`` and ``ultjobs.queue.oldest_age`` (s) observable gauges per ``queue``,
  and ``ultjobs.slots.held`` per ``key``: sampled by one worker of the fleet at a time
  (rule 71 (gauges-one-reader), ``worker/gauges.py``); every other process reports none of them.

Recording never fails a run or a worker (rule 73 (metric-never-fails)): an exception inside the SDK
is logged once and dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, MeterProvider, NoOpMeterProvider, Observation

from .logs import log_event

logger = logging.getLogger(__name__)

#: Histogram buckets in seconds: from a no-op body (milliseconds) to an hour-long job or wait.
#: The SDK's default buckets are made for milliseconds and would put every job in the first.
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                   300.0, 900.0, 3600.0)

_override: MeterProvider | None = None
_cached: tuple[MeterProvider, Instruments | None] | None = None
_cache_lock = threading.Lock()
_failed_once = False


def use_meter_provider(provider: MeterProvider | None) -> None:
    """Record into ``provider`` instead of the global one (None: the global one again).

    For a project that keeps its meter provider out of the global (as OpenTelemetry's
    instrumentations take ``meter_provider=``), and for tests with an in-memory reader.
    """
    global _override, _cached
    with _cache_lock:
        _override = provider
        _cached = None


def _is_sdk(provider: MeterProvider) -> bool:
    """Whether ``provider`` records anything: not the API's no-op, nor its proxy before an SDK
    is set (the proxy is private to the API, so it is told by name)."""
    return not (isinstance(provider, NoOpMeterProvider)
                or type(provider).__name__ == "_ProxyMeterProvider")


def instruments() -> Instruments | None:
    """The instruments of the current meter provider; None when no SDK is configured.

    One global read and an identity check per call once built: the provider is looked up every
    time, so one set after the first job (``set_meter_provider`` in a receiver of Django's
    ``ready``, say) is used from then on."""
    provider = _override if _override is not None else metrics.get_meter_provider()
    cached = _cached
    if cached is not None and cached[0] is provider:
        return cached[1]
    return _build(provider)


def _build(provider: MeterProvider) -> Instruments | None:
    global _cached
    with _cache_lock:
        if _cached is not None and _cached[0] is provider:
            return _cached[1]
        built = Instruments(provider.get_meter("django_ultjobs")) if _is_sdk(provider) else None
        _cached = (provider, built)
        return built


def enabled() -> bool:
    """Whether metrics are recorded (an SDK meter provider is configured)."""
    return instruments() is not None


class Instruments:
    """The package's instruments, made once per meter provider."""

    def __init__(self, meter: metrics.Meter) -> None:
        self.enqueued = meter.create_counter(
            "ultjobs.jobs.enqueued", unit="{job}", description="Jobs whose enqueue committed")
        self.finished = meter.create_counter(
            "ultjobs.jobs.finished", unit="{attempt}",
            description="Attempts whose outcome a worker wrote, by outcome")
        self.batches_finished = meter.create_counter(
            "ultjobs.batches.finished", unit="{batch}",
            description="Batches whose last member finished for good, by outcome")
        self.duration = _histogram(meter, "ultjobs.job.duration",
                                   "How long a job's body ran, by outcome")
        self.wait = _histogram(meter, "ultjobs.job.wait",
                               "From the moment a job was due to the start of its run")
        meter.create_observable_gauge(
            "ultjobs.queue.depth", callbacks=[board.observe_depth], unit="{job}",
            description="Runnable jobs per queue (sampled by one worker of the fleet)")
        meter.create_observable_gauge(
            "ultjobs.queue.oldest_age", callbacks=[board.observe_oldest_age], unit="s",
            description="How long the oldest runnable job of each queue has been due")
        meter.create_observable_gauge(
            "ultjobs.slots.held", callbacks=[board.observe_slots], unit="{slot}",
            description="Fleet slots held per key (sampled by one worker of the fleet)")


def _histogram(meter: metrics.Meter, name: str, description: str) -> Any:
    try:
        return meter.create_histogram(name, unit="s", description=description,
                                      explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)
    except TypeError:  # an API older than 1.23 takes no advice on buckets
        return meter.create_histogram(name, unit="s", description=description)


def _dropped(exc: BaseException) -> None:
    """Log the first error inside the SDK, once per process (rule 73 (metric-never-fails)): metrics
    must never fail a run, and a broken exporter must not flood the log once per job either."""
    global _failed_once
    if not _failed_once:
        _failed_once = True
        log_event(logger, logging.WARNING, "jobs.metrics.record-failed", error=repr(exc),
                  note="metrics recording failed and is dropped; logged once per process")


def record_enqueued(jobs: Iterable[tuple[str, str]], alias: str) -> None:
    """Count enqueued ``(job name, queue)`` pairs once the caller's transaction commits (at
    once outside one): a rolled-back enqueue queued nothing and is not counted."""
    inst = instruments()
    if inst is None:
        return
    counts: dict[tuple[str, str], int] = {}
    for key in jobs:
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return

    def add() -> None:
        try:
            for (name, queue), n in counts.items():
                inst.enqueued.add(n, {"job.name": name, "queue": queue})
        except Exception as exc:
            _dropped(exc)

    transaction.on_commit(add, using=alias)


def record_finished(runs: Iterable[tuple[str, str, str, float | None]]) -> None:
    """Count attempts whose outcome was written, ``(job name, queue, outcome, seconds the body
    ran)`` each (None: it did not run, e.g. parked or cancelled before it started).

    One ``add`` per distinct attributes of the batch, not one per run: each call into the SDK
    costs microseconds, and a settle batch is mostly one kind."""
    inst = instruments()
    if inst is None:
        return
    try:
        counts: dict[tuple[str, str, str], int] = {}
        for name, queue, outcome, duration in runs:
            key = (name, queue, outcome)
            counts[key] = counts.get(key, 0) + 1
            if duration is not None:
                inst.duration.record(duration, {"job.name": name, "queue": queue,
                                                "outcome": outcome})
        for (name, queue, outcome), n in counts.items():
            inst.finished.add(n, {"job.name": name, "queue": queue, "outcome": outcome})
    except Exception as exc:
        _dropped(exc)


def record_batches_finished(outcomes: Iterable[str], alias: str) -> None:
    """Count finished batches, one ``outcome`` each, once the caller's transaction commits when
    it is Django's (at once inside a store's own transaction, which commits right after)."""
    inst = instruments()
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    if inst is None or not counts:
        return

    def add() -> None:
        try:
            for outcome, n in counts.items():
                inst.batches_finished.add(n, {"outcome": outcome})
        except Exception as exc:
            _dropped(exc)

    transaction.on_commit(add, using=alias)


def record_wait_on(inst: Instruments | None, name: str, queue: str, seconds: float) -> None:
    """Record how long a job waited from due to start, into instruments looked up already (a
    worker's, once per claim)."""
    if inst is None:
        return
    try:
        inst.wait.record(max(0.0, seconds), {"job.name": name, "queue": queue})
    except Exception as exc:
        _dropped(exc)


# -- gauges ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueSample:
    """One queue's runnable jobs, as the sampling worker last read them."""

    queue: str
    depth: int
    oldest_age: float


@dataclass(frozen=True, slots=True)
class GaugeSample:
    """What one sampling read found: per queue, and the fleet slots held per key."""

    queues: tuple[QueueSample, ...]
    slots: tuple[tuple[str, int], ...]


class GaugeBoard:
    """The latest samples of this process's sampling workers, read by the gauges' callbacks.

    The callbacks run in the SDK's reader (a scrape, a periodic export) and only read what a
    sampler published here: a scrape never runs SQL. A worker that is not the fleet's sampler
    has published nothing, so it reports no gauge at all, and a dashboard summing the gauges
    over every process counts each queue once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: dict[str, GaugeSample] = {}

    def publish(self, source: str, sample: GaugeSample) -> None:
        with self._lock:
            self._samples[source] = sample

    def withdraw(self, source: str) -> None:
        with self._lock:
            self._samples.pop(source, None)

    def _current(self) -> list[GaugeSample]:
        with self._lock:
            return list(self._samples.values())

    def observe_depth(self, options: CallbackOptions) -> Iterator[Observation]:
        for sample in self._current():
            for q in sample.queues:
                yield Observation(q.depth, {"queue": q.queue})

    def observe_oldest_age(self, options: CallbackOptions) -> Iterator[Observation]:
        for sample in self._current():
            for q in sample.queues:
                yield Observation(q.oldest_age, {"queue": q.queue})

    def observe_slots(self, options: CallbackOptions) -> Iterator[Observation]:
        for sample in self._current():
            for key, held in sample.slots:
                yield Observation(held, {"key": key})


#: The process's one board (a test may run several workers in one process; one of them at most
#: is the fleet's sampler).
board = GaugeBoard()
