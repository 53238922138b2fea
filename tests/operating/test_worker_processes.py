"""Pause and recycling with real ``runjobworker`` processes, on PostgreSQL and SQLite.

Rule 75 (paused-queue): a paused queue is not claimed while the worker's other queues are; a resume
is picked up (at once with LISTEN, within a poll interval without). Rule 76 (recycle-at-bound):
``--max-jobs N`` exits 0 after exactly N runs, every run finished and none handed back;
``--max-memory`` exits 0 the same way. Every wait is on a database condition or the process's exit,
with a deadline.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from django_ultjobs.models import AttemptOutcome, AttemptRecord, Job, Worker
from django_ultjobs.operations import pause_queue, resume_queue
from tests.conftest import WorkerProcesses, wait_until
from tests.testapp.jobs import record
from tests.testapp.models import RunLog

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]

FLAGS = ("--visibility-timeout", "5", "--heartbeat-interval", "0.5", "--poll-interval", "0.1")


def _exit_code(proc: subprocess.Popen[bytes], procs: WorkerProcesses, timeout: float) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"worker did not exit in {timeout}s:\n{procs.logs()}") from None


def _statuses(alias: str, ids: list[int]) -> dict[int, str]:
    return dict(Job.objects.using(alias).filter(id__in=ids).values_list("id", "status"))


# -- pause (rule 75 (paused-queue))
# ------------------------------------------------------------------------------


def test_a_paused_queue_is_not_claimed_the_others_are_and_resume_picks_it_up(
        alias: str, worker_processes: WorkerProcesses) -> None:
    pause_queue("held", using=alias)
    held = [record.using(queue="held").enqueue(label="held").id for _ in range(3)]
    free = [record.using(queue="free").enqueue(label="free").id for _ in range(3)]
    proc = worker_processes.start(alias, *FLAGS, "--queue", "held", "--queue", "free")
    wait_until(lambda: set(_statuses(alias, free).values()) == {"succeeded"}, 30,
               message="the unpaused queue's jobs to run")
    # Several more claim rounds (poll 0.1 s) than it took the free queue to drain.
    time.sleep(1.0)
    assert set(_statuses(alias, held).values()) == {"queued"}
    assert not RunLog.objects.using(alias).filter(label="held").exists()
    # Enqueue still works while paused; the job waits with the others.
    held.append(record.using(queue="held").enqueue(label="held").id)
    resumed = time.monotonic()
    resume_queue("held", using=alias)
    wait_until(lambda: set(_statuses(alias, held).values()) == {"succeeded"}, 30,
               message="the resumed queue's jobs to run")
    assert time.monotonic() - resumed < 10
    assert proc.poll() is None, worker_processes.logs()


def test_pausing_lets_the_runs_in_flight_finish(
        alias: str, worker_processes: WorkerProcesses) -> None:
    running = record.using(queue="held").enqueue(label="long", seconds=1.5).id
    later = record.using(queue="held").enqueue(label="later").id
    worker_processes.start(alias, *FLAGS, "--queue", "held", "--threads", "1")
    wait_until(lambda: RunLog.objects.using(alias).filter(label="long").exists(), 30,
               message="the long run to start")
    pause_queue("held", using=alias)
    wait_until(lambda: _statuses(alias, [running])[running] == "succeeded", 30,
               message="the run in flight to finish")
    time.sleep(0.5)  # a few claim rounds after the thread became free
    assert _statuses(alias, [later])[later] == "queued"


# -- recycling (rule 76 (recycle-at-bound))
# --------------------------------------------------------------------------


def test_max_jobs_exits_0_after_exactly_n_runs_none_lost_none_handed_back(
        alias: str, worker_processes: WorkerProcesses) -> None:
    ids = [record.enqueue(label="r", seconds=0.2).id for _ in range(10)]
    # A grace period of 0: the recycling drain must not use it to cancel the runs in flight.
    proc = worker_processes.start(alias, *FLAGS, "--threads", "4", "--max-jobs", "6",
                                  "--grace-period", "0")
    assert _exit_code(proc, worker_processes, 60) == 0, worker_processes.logs()
    statuses = _statuses(alias, ids)
    assert sorted(statuses.values()).count("succeeded") == 6
    assert sorted(statuses.values()).count("queued") == 4
    assert RunLog.objects.using(alias).filter(label="r").count() == 6
    assert RunLog.objects.using(alias).filter(label="r", ended_at__isnull=True).count() == 0
    # None handed back: the queued ones were never claimed, every attempt row is a success.
    assert set(Job.objects.using(alias).filter(status="queued").values_list("attempt",
                                                                              flat=True)) == {0}
    assert set(AttemptRecord.objects.using(alias).values_list("outcome", flat=True)) == {
        AttemptOutcome.SUCCEEDED}
    assert "jobs.worker.recycling" in worker_processes.logs()
    # The next process takes the rest.
    proc = worker_processes.start(alias, *FLAGS, "--max-jobs", "4")
    assert _exit_code(proc, worker_processes, 60) == 0, worker_processes.logs()
    assert set(_statuses(alias, ids).values()) == {"succeeded"}


def test_max_memory_exits_0_without_handing_back_the_run_in_flight(
        alias: str, worker_processes: WorkerProcesses) -> None:
    job_id = record.enqueue(label="m", seconds=1.0).id
    other = record.enqueue(label="m2").id
    # 1 MiB: reached at the first reading once a run started; the run outlives the grace period.
    proc = worker_processes.start(alias, *FLAGS, "--max-memory", "1", "--grace-period", "0",
                                  "--threads", "1")
    assert _exit_code(proc, worker_processes, 60) == 0, worker_processes.logs()
    assert "reason=max-memory" in worker_processes.logs()
    assert _statuses(alias, [job_id, other]) == {job_id: "succeeded", other: "queued"}
    assert list(AttemptRecord.objects.using(alias).values_list("job_id", "outcome")) == [
        (job_id, AttemptOutcome.SUCCEEDED)]


def test_with_listen_a_resume_is_picked_up_at_once_not_at_the_next_poll(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:
    pause_queue("held", using=pg_alias)
    job_id = record.using(queue="held").enqueue(label="held").id
    # A poll interval far longer than the wait below: only the resume's notification can do it.
    worker_processes.start(pg_alias, "--visibility-timeout", "5", "--heartbeat-interval", "0.5",
                           "--poll-interval", "60", "--queue", "held")
    wait_until(lambda: Worker.objects.using(pg_alias).exists(), 30, message="worker start")
    time.sleep(1.0)  # its first claims (start, LISTEN in place) found the queue paused
    assert _statuses(pg_alias, [job_id])[job_id] == "queued"
    resumed = time.monotonic()
    resume_queue("held", using=pg_alias)
    wait_until(lambda: _statuses(pg_alias, [job_id])[job_id] == "succeeded", 20,
               message="the resumed job to run")
    assert time.monotonic() - resumed < 10
