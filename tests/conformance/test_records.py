"""Attempts found lapsed, and the worker rows operators read, on both engines."""

from __future__ import annotations

import pytest

from django_ultjobs.models import JobAttempt, Worker
from django_ultjobs.store import JobStore, LostAttempt
from tests.doubles import FakeClock

from .helpers import claim, enqueue, new_job

# available_apps: between tests, flush only the queue's tables and skip re-creating every
# app's permissions and content types (the suite runs ~5x faster).
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


def test_record_attempts_writes_what_a_dead_worker_never_reported(
    cstore: JobStore, clock: FakeClock, alias: str
) -> None:  # rule 1 (leased-claim)
    (job_id,) = enqueue(cstore, new_job())
    (first,) = claim(cstore, "dead", timeout=5)
    clock.advance(5)
    (again,) = claim(cstore, "w2")
    assert again.previous_claimed_at is not None
    cstore.record_attempts([LostAttempt(
        job_id=job_id, attempt=again.attempt - 1, worker_id=again.redelivered_from or "",
        started_at=again.previous_claimed_at, outcome="lease_lost",
        error="the worker's lease lapsed")])
    cstore.record_attempts([])
    (attempt,) = JobAttempt.objects.using(alias).filter(job_id=job_id)
    assert (attempt.attempt, attempt.worker_id, attempt.outcome, attempt.error) == (
        1, "dead", "lease_lost", "the worker's lease lapsed")
    assert (attempt.started_at, attempt.finished_at) == (first.claimed_at, clock.now)
    assert (attempt.slot_key, attempt.slot) == ("", None)


def test_a_worker_row_is_registered_touched_and_stopped(cstore: JobStore, clock: FakeClock,
                                                        alias: str) -> None:
    cstore.worker_upsert("host:1:abc", "host", 1, 4, ["default", "emails"])
    started = clock.now
    worker = Worker.objects.using(alias).get(id="host:1:abc")
    assert (worker.hostname, worker.pid, worker.threads, worker.queues, worker.in_flight) == (
        "host", 1, 4, ["default", "emails"], 0)
    assert (worker.started_at, worker.last_seen_at, worker.stopped_at) == (started, started, None)
    clock.advance(3)
    cstore.worker_touch("host:1:abc", 3)
    worker.refresh_from_db()
    assert (worker.last_seen_at, worker.in_flight) == (clock.now, 3)
    clock.advance(1)
    cstore.worker_stop("host:1:abc")
    worker.refresh_from_db()
    assert (worker.stopped_at, worker.in_flight) == (clock.now, 0)
    # Re-registering under the same id clears the stop.
    clock.advance(1)
    cstore.worker_upsert("host:1:abc", "host", 2, 8, ["default"])
    worker.refresh_from_db()
    assert (worker.pid, worker.threads, worker.queues, worker.stopped_at) == (
        2, 8, ["default"], None)
    assert worker.last_seen_at == clock.now


def test_a_touch_says_when_the_row_is_gone_and_a_row_written_again_keeps_its_start(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:  # rule 106 (live-row-kept)
    started = cstore.worker_upsert("host:1:abc", "host", 1, 4, ["default"])
    assert started == clock.now
    assert cstore.worker_touch("host:1:abc", 0) is True
    Worker.objects.using(alias).filter(id="host:1:abc").delete()
    clock.advance(60)
    assert cstore.worker_touch("host:1:abc", 2) is False
    overrun = [{"job_id": 7, "job": "slow", "thread": "ultjobs-exec-1", "timeout": 0.5}]
    again = cstore.worker_upsert("host:1:abc", "host", 1, 4, ["default"], jobs=["slow"],
                                 in_flight=2, overrunning=overrun, started_at=started)
    assert again == started
    worker = Worker.objects.using(alias).get(id="host:1:abc")
    assert (worker.started_at, worker.last_seen_at, worker.in_flight) == (
        started, clock.now, 2)
    assert (worker.jobs, worker.overrunning) == (["slow"], overrun)
    # A process starting again under the id begins with no run and nothing overrunning.
    cstore.worker_upsert("host:1:abc", "host", 2, 4, ["default"])
    worker.refresh_from_db()
    assert (worker.in_flight, worker.overrunning) == (0, None)
