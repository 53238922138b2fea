"""Regressions for bugs a review of the worker found; each test fails if its bug comes back."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from django_ultjobs import send_event
from django_ultjobs.models import Job, JobAttempt, JobEvent
from django_ultjobs.retention import prune
from django_ultjobs.store import get_store
from tests.conftest import running_worker, wait_until
from tests.stepsapp.jobs import (
    cancel_myself_then_fail,
    nested_match,
    raises_unprintable,
    wait_for_order,
    wait_paid,
)
from tests.testapp.jobs import add, record
from tests.testapp.models import RunLog

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def _job(alias: str, job_id: int) -> Job:
    return Job.objects.using(alias).get(pk=job_id)


def _done(alias: str, *ids: int) -> bool:
    return Job.objects.using(alias).filter(
        pk__in=ids, status__in=["succeeded", "failed", "cancelled"]).count() == len(ids)


def test_an_exception_that_cannot_print_itself_is_still_settled(alias: str) -> None:
    # rule 13: the run is settled (not left running under the heartbeat) and the executor
    # thread survives to run the next job.
    bad = raises_unprintable.enqueue()
    with running_worker(alias, threads=1):
        wait_until(lambda: _done(alias, bad.id))
        after = add.enqueue(1, 1)
        wait_until(lambda: _done(alias, after.id))
    assert _job(alias, bad.id).status == "failed"
    assert "Unprintable" in _job(alias, bad.id).last_error
    assert _job(alias, after.id).status == "succeeded"


def test_a_worker_that_claims_its_own_lapsed_job_again_cancels_the_old_run(alias: str) -> None:
    # rule 3: heartbeats fail for longer than the timeout, so this same worker re-claims its
    # own job. The old run must be cancelled (its lease is gone) and the new one kept alive; the
    # job then succeeds on attempt 2 instead of being re-delivered again and again.
    store_cls = type(get_store(alias))
    failing_until = timezone.now() + timedelta(seconds=1.6)

    class BlippingStore(store_cls):  # type: ignore[valid-type, misc]
        def heartbeat(self, runs, visibility_timeout):  # type: ignore[no-untyped-def]
            if timezone.now() < failing_until:
                raise ConnectionError("database blip")
            return super().heartbeat(runs, visibility_timeout)

    job = record.enqueue(label="long", seconds=2.0)
    with running_worker(alias, threads=2, visibility_timeout=1.0, heartbeat_interval=0.2,
                        store=BlippingStore(alias)):
        wait_until(lambda: _done(alias, job.id), timeout=30)
    final = _job(alias, job.id)
    assert (final.status, final.attempt) == ("succeeded", 2)
    outcomes = list(JobAttempt.objects.using(alias).filter(job_id=job.id)
                    .order_by("attempt", "id").values_list("attempt", "outcome"))
    assert outcomes[0] == (1, "lease_lost") and outcomes[-1] == (2, "succeeded")
    assert len(outcomes) == 2


def test_a_cancel_request_is_not_lost_when_the_run_retries_first(alias: str) -> None:
    # The request lands while the run ends in a retry: the job is cancelled, not run again.
    job = cancel_myself_then_fail.enqueue()
    with running_worker(alias):
        wait_until(lambda: _done(alias, job.id))
    assert _job(alias, job.id).status == "cancelled"
    assert RunLog.objects.using(alias).filter(job_id=job.id, label="ran").count() == 1


def test_an_event_sent_with_the_enqueue_is_found_at_once(alias: str) -> None:
    # SQLite compared the job's enqueue time (microseconds) with event times (milliseconds) as
    # text: an event sent in the same millisecond was missed, and the job woke forever.
    with transaction.atomic(using=alias):
        job = wait_for_order.enqueue(77)
        send_event("order.shipped", {"order_id": 77})
    with running_worker(alias):
        wait_until(lambda: _done(alias, job.id))
    assert _job(alias, job.id).status == "succeeded"
    assert RunLog.objects.using(alias).filter(job_id=job.id, label="started").count() == 1


def test_match_compares_json_values_the_same_on_both_engines(alias: str) -> None:
    job = wait_paid.enqueue()
    bad = nested_match.enqueue()
    send_event("paid", {"paid": 1})           # 1 is not true
    with running_worker(alias):
        wait_until(lambda: _job(alias, job.id).status == "waiting" and _done(alias, bad.id))
        send_event("paid", {"paid": True})
        wait_until(lambda: _done(alias, job.id))
    assert _job(alias, job.id).result is True or _job(alias, job.id).result == {"paid": True}
    assert "must be a string, number, boolean or None" in _job(alias, bad.id).last_error


def test_prune_keeps_events_a_queued_job_may_still_consume(alias: str) -> None:
    job = wait_for_order.using(delay=timedelta(hours=1)).enqueue(5)
    Job.objects.using(alias).filter(pk=job.id).update(
        created_at=timezone.now() - timedelta(days=30))
    event = JobEvent.objects.using(alias).create(name="order.shipped", payload={"order_id": 5})
    JobEvent.objects.using(alias).filter(pk=event.pk).update(
        created_at=timezone.now() - timedelta(days=20))
    prune(older_than=timedelta(days=14), using=alias)
    assert JobEvent.objects.using(alias).filter(pk=event.pk).exists()


def test_a_drain_does_not_free_the_slot_of_a_body_that_ignores_it(alias: str) -> None:
    # rule 5: an abandoned body may still run until the process exits; its slot must lapse on
    # its TTL and its job come back only after a visibility timeout, not at once.
    from django_ultjobs.models import JobLease
    from tests.testapp.jobs import capped_ignoring

    job = capped_ignoring.enqueue(3.0)
    stopper = threading.Event()
    with running_worker(alias, threads=1, grace_period=0.1, cancel_wait=0.1,
                        visibility_timeout=5.0) as worker:
        wait_until(lambda: _job(alias, job.id).status == "running")
        stopper.set()
        worker.request_stop()
    row = _job(alias, job.id)
    assert row.status == "queued" and row.attempt == 0
    assert row.visible_at > timezone.now() + timedelta(seconds=2)
    assert JobLease.objects.using(alias).filter(key="job:capped_ignoring").exists()


def test_a_reclaimed_jobs_old_run_gives_up_its_slot(alias: str) -> None:
    # rule 8: when this worker claims its own lapsed job again, the new run's slot has the same
    # holder (<worker>:<job id>) as the old run's. The old run must stop renewing and must not
    # release: either would extend or free the slot the new run's body is using.
    from django_ultjobs.store import ClaimedJob, HeldLease
    from django_ultjobs.worker import Worker, WorkerOptions
    from django_ultjobs.worker.runs import Run
    from tests.testapp.jobs import capped

    job = capped.enqueue(0.01)
    worker = Worker(WorkerOptions(database=alias, threads=2))

    def claimed(token: str) -> ClaimedJob:
        return ClaimedJob(id=job.id, name="capped", queue="default", priority=0, args=[0.01],
                          kwargs={}, attempt=1, max_attempts=20, token=token, traceparent="",
                          tracestate="", enqueued_by="", cancel_requested=False,
                          claimed_at=timezone.now())

    holder = f"{worker.worker_id}:{job.id}"
    older = Run(job=claimed("00000000-0000-0000-0000-00000000000a"), spec=capped,
                lease=HeldLease(key="job:capped", slot=0, holder=holder,
                                expires_at=timezone.now()))
    worker.registry.add(older)
    worker._dispatch([claimed("00000000-0000-0000-0000-00000000000b")])
    assert older.scope.cancelled
    assert older.slot_lost
    # Neither kept for a next run nor given back when its settle is written.
    worker.slots.keep([older])
    assert worker.slots.kept == 0
