"""A worker that claims its own lapsed job again: the old run is cancelled
(rule 3 (lost-lease-cancels)) and gives up its fleet slot to the new run
(rule 8 (lost-slot-cancels)), on SQLite and PostgreSQL.

Heartbeats that fail for longer than the visibility timeout let the job's lease lapse while its
run goes on; the next claim, by the same worker, re-delivers it as a new attempt.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_ultjobs.models import AttemptRecord, Job
from django_ultjobs.store import get_store
from tests.conftest import running_worker, wait_until
from tests.testapp.jobs import record

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def _job(alias: str, job_id: int) -> Job:
    return Job.objects.using(alias).get(pk=job_id)


def _done(alias: str, *ids: int) -> bool:
    return Job.objects.using(alias).filter(
        pk__in=ids, status__in=["succeeded", "failed", "cancelled"]).count() == len(ids)


def test_a_worker_that_claims_its_own_lapsed_job_again_cancels_the_old_run(alias: str) -> None:
    # rule 3 (lost-lease-cancels): heartbeats fail for longer than the timeout, so this same worker
    # re-claims its own job. The old run must be cancelled (its lease is gone) and the new one kept
    # alive; the job then succeeds on attempt 2 instead of being re-delivered again and again.
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
    outcomes = list(AttemptRecord.objects.using(alias).filter(job_id=job.id)
                    .order_by("attempt", "id").values_list("attempt", "outcome"))
    assert outcomes[0] == (1, "lease_lost") and outcomes[-1] == (2, "succeeded")
    assert len(outcomes) == 2


def test_a_reclaimed_jobs_old_run_gives_up_its_slot(alias: str) -> None:
    # rule 8 (lost-slot-cancels): when this worker claims its own lapsed job again, the new run's
    # slot has the same holder (<worker>:<job id>) as the old run's. The old run must stop renewing
    # and must not release: either would extend or free the slot the new run's body is using.
    from django_ultjobs.store import ClaimedJob, SlotHold
    from django_ultjobs.worker.options import WorkerOptions
    from django_ultjobs.worker.runs import Run
    from django_ultjobs.worker.worker import WorkerProcess
    from tests.testapp.jobs import capped

    job = capped.enqueue(0.01)
    worker = WorkerProcess(WorkerOptions(database=alias, threads=2))

    def claimed(token: str) -> ClaimedJob:
        return ClaimedJob(id=job.id, name="capped", queue="default", priority=0, args=[0.01],
                          kwargs={}, attempt=1, max_attempts=20, token=token, traceparent="",
                          tracestate="", enqueued_by="", cancel_requested=False,
                          claimed_at=timezone.now())

    holder = f"{worker.worker_id}:{job.id}"
    older = Run(job=claimed("00000000-0000-0000-0000-00000000000a"), spec=capped,
                slot=SlotHold(key="job:capped", slot=0, holder=holder,
                              expires_at=timezone.now()))
    worker.runs.add(older)
    worker.dispatcher.dispatch([claimed("00000000-0000-0000-0000-00000000000b")])
    assert older.scope.cancelled
    assert older.slot_lost
    # Neither kept for a next run nor released when its settle is written.
    worker.slots.keep([older])
    assert worker.slots.kept == 0
