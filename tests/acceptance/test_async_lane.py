"""Acceptance: the async lane (rules 85 (one-event-loop) to 88 (async-drain)) in real
``runjobworker`` processes, both engines.

One worker process runs ``async def`` bodies as tasks of one event loop, ``--async-concurrency``
of them at once apart from ``--threads``; their cancellation cancels the task (``Task.cancel``), so
a body stuck in ``await asyncio.sleep(3600)`` ends as a cancelled sync run would; a claim never
takes more of a lane's jobs than it has places; a killed worker's async jobs are re-delivered.
"""

from __future__ import annotations

import signal
import time

import pytest

from django_ultjobs.models import AttemptRecord, Job
from django_ultjobs.operations import cancel_jobs
from tests.conftest import WorkerProcesses
from tests.testapp.jobs import async_sleep, async_stuck, async_stuck_timeout, sync_sleep

from .fleet import Fleet

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]


def _statuses(alias: str, ids: list[int]) -> dict[str, int]:
    found: dict[str, int] = {}
    for status in Job.objects.using(alias).filter(id__in=ids).values_list("status", flat=True):
        found[status] = found.get(status, 0) + 1
    return found


def _all_succeeded(alias: str, ids: list[int]) -> bool:
    return Job.objects.using(alias).filter(id__in=ids, status="succeeded").count() == len(ids)


def test_one_process_runs_a_thousand_async_bodies_at_once(
        alias: str, worker_processes: WorkerProcesses) -> None:
    # rule 85 (one-event-loop): 1,000 bodies that each wait 1 s, on ONE process with 4 threads. As
    # many runs at once as threads (an event loop per run on an executor thread) would take 250 s;
    # the lane takes a few seconds. The bound leaves a loaded machine room and the old design none.
    ids = async_sleep.bulk_enqueue([(1.0,)] * 1000)
    fleet = Fleet(worker_processes, alias)
    worker = fleet.start("async", "--threads", "4", "--async-concurrency", "1000")
    fleet.wait_registered(worker)
    started = time.monotonic()
    fleet.wait(lambda: _all_succeeded(alias, ids), 60.0, "1,000 async jobs to succeed")
    elapsed = time.monotonic() - started
    assert elapsed < 40.0, f"1,000 bodies of 1 s took {elapsed:.1f} s"
    workers = set(AttemptRecord.objects.using(alias).filter(job_id__in=ids)
                  .values_list("worker_id", flat=True))
    assert workers == {worker}


def test_async_concurrency_bounds_the_async_bodies_at_once(
        alias: str, worker_processes: WorkerProcesses) -> None:
    # rules 85 (one-event-loop) and 87 (no-claim-beyond-free-places): --async-concurrency 5 runs at
    # most 5 bodies at once, so 20 bodies of 1 s take at least 4 s; and the claim never took more
    # than the free places: a job claimed without a place would wait for one, its attempt lasting up
    # to 4 s from claim to settle.
    ids = async_sleep.bulk_enqueue([(1.0,)] * 20)
    fleet = Fleet(worker_processes, alias)
    worker = fleet.start("bounded", "--threads", "1", "--async-concurrency", "5")
    fleet.wait_registered(worker)
    started = time.monotonic()
    fleet.wait(lambda: _all_succeeded(alias, ids), 60.0, "20 async jobs to succeed")
    assert time.monotonic() - started >= 4.0
    attempts = list(AttemptRecord.objects.using(alias).filter(job_id__in=ids)
                    .values_list("started_at", "finished_at"))
    assert len(attempts) == 20
    assert max((end - start).total_seconds() for start, end in attempts) < 3.0


def test_async_and_sync_jobs_both_progress(alias: str, worker_processes: WorkerProcesses
                                           ) -> None:
    # rule 87 (no-claim-beyond-free-places): the one thread is held by sync bodies; the async jobs
    # run meanwhile on the loop, and the sync ones are not held back by the async backlog either.
    sync_ids = sync_sleep.bulk_enqueue([(1.0,)] * 3)
    async_ids = async_sleep.bulk_enqueue([(1.0,)] * 200)
    fleet = Fleet(worker_processes, alias)
    worker = fleet.start("mixed", "--threads", "1", "--async-concurrency", "200")
    fleet.wait_registered(worker)
    started = time.monotonic()
    fleet.wait(lambda: _all_succeeded(alias, async_ids), 60.0, "the async jobs to succeed")
    async_done = time.monotonic() - started
    fleet.wait(lambda: _all_succeeded(alias, sync_ids), 60.0, "the sync jobs to succeed")
    # 200 async bodies of 1 s through the one thread would take 200 s.
    assert async_done < 30.0, f"the async jobs took {async_done:.1f} s"
    # The three sync bodies of 1 s ran one after another on the one thread.
    assert time.monotonic() - started >= 3.0


def test_a_stuck_async_body_is_cancelled_by_cancel_jobs(
        alias: str, worker_processes: WorkerProcesses) -> None:
    # rule 86 (async-cancel): the body never looks at its cancellation; Task.cancel stops it at its
    # await.
    job = async_stuck.enqueue()
    fleet = Fleet(worker_processes, alias)
    worker = fleet.start("cancel", "--async-concurrency", "10")
    fleet.wait_registered(worker)
    fleet.wait(lambda: Job.objects.using(alias).get(id=job.id).status == "running", 30.0,
               "the stuck job to run")
    time.sleep(0.3)  # the body is inside its await (the claim is a few ms before it)
    asked = time.monotonic()
    cancel_jobs([job.id], using=alias, reason="stuck")
    fleet.wait(lambda: Job.objects.using(alias).get(id=job.id).status == "cancelled", 30.0,
               "the stuck job to be cancelled")
    # A heartbeat (0.5 s) carries the request; nothing waited for the hour to pass.
    assert time.monotonic() - asked < 10.0
    attempt = AttemptRecord.objects.using(alias).get(job_id=job.id)
    assert attempt.outcome == "cancelled"
    assert "cancelled on request" in attempt.error
    assert fleet.events("jobs.worker.cancel-requested", job_id=job.id)


def test_a_stuck_async_body_is_cancelled_by_its_timeout(
        alias: str, worker_processes: WorkerProcesses) -> None:
    # rules 55 (timeout-cancels) and 86 (async-cancel): JobTimeoutError is the reason, the outcome
    # timed_out, as for sync.
    job = async_stuck_timeout.enqueue()
    fleet = Fleet(worker_processes, alias)
    worker = fleet.start("timeout", "--async-concurrency", "10")
    fleet.wait_registered(worker)
    fleet.wait(lambda: Job.objects.using(alias).get(id=job.id).status == "failed", 30.0,
               "the stuck job to time out")
    attempt = AttemptRecord.objects.using(alias).get(job_id=job.id)
    assert attempt.outcome == "timed_out"
    assert (attempt.finished_at - attempt.started_at).total_seconds() < 5.0
    # Cancelled at its await: not reported as a body overrunning its timeout
    # (rule 56 (overrun-reported)).
    assert not fleet.events("jobs.worker.run-overrunning", job_id=job.id)


def test_a_killed_workers_async_jobs_are_redelivered(
        alias: str, worker_processes: WorkerProcesses) -> None:
    # rule 1 (leased-claim) for async bodies: SIGKILL leaves their leases to lapse; another worker
    # runs them.
    ids = async_stuck.bulk_enqueue([(3600.0,)] * 20)
    fleet = Fleet(worker_processes, alias)
    doomed = fleet.start("doomed", "--async-concurrency", "50")
    fleet.wait_registered(doomed)
    fleet.wait(lambda: _statuses(alias, ids).get("running") == 20, 30.0,
               "the async jobs to run on the doomed worker")
    worker_processes.kill(fleet.by_id[doomed])
    heir = fleet.start("heir", "--async-concurrency", "50")
    fleet.wait(lambda: _all_succeeded(alias, ids), 60.0, "the re-delivered jobs to succeed")
    assert set(Job.objects.using(alias).filter(id__in=ids).values_list("attempt", flat=True)) \
        == {2}
    lost = AttemptRecord.objects.using(alias).filter(job_id__in=ids, attempt=1)
    assert set(lost.values_list("outcome", "worker_id")) == {("lease_lost", doomed)}
    assert set(AttemptRecord.objects.using(alias).filter(job_id__in=ids, attempt=2)
               .values_list("worker_id", flat=True)) == {heir}


def test_a_draining_worker_cancels_its_stuck_async_bodies_and_hands_them_back(
        alias: str, worker_processes: WorkerProcesses) -> None:
    # rule 88 (async-drain): SIGTERM, the grace period, then Task.cancel: the stuck bodies unwind at
    # once and their jobs are handed back unburned; nothing waits out --cancel-wait (30 s here)
    # nor hands a job back on a dead worker's schedule (abandonment).
    ids = async_stuck.bulk_enqueue([(3600.0,)] * 5)
    fleet = Fleet(worker_processes, alias)
    worker = fleet.start("drain", "--grace-period", "0.5", "--cancel-wait", "30")
    fleet.wait_registered(worker)
    fleet.wait(lambda: _statuses(alias, ids).get("running") == 5, 30.0,
               "the stuck jobs to run")
    proc = fleet.by_id[worker]
    stopping = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    drained = time.monotonic() - stopping
    assert drained < 15.0
    assert _statuses(alias, ids) == {"queued": 5}
    assert set(Job.objects.using(alias).filter(id__in=ids).values_list("attempt", flat=True)) \
        == {0}
    attempts = AttemptRecord.objects.using(alias).filter(job_id__in=ids)
    assert set(attempts.values_list("outcome", flat=True)) == {"interrupted"}
    assert all("handed back" in error and "ignored" not in error
               for error in attempts.values_list("error", flat=True))
    assert not fleet.events("jobs.worker.run-abandoned")
