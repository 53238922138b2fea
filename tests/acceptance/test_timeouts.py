"""Acceptance: run timeouts (rules 55 (timeout-cancels), 56 (overrun-reported)) with real
``runjobworker`` processes.

A cooperative body is cancelled within 100 ms of its deadline whatever the heartbeat interval,
on both engines (rule 130 (timeout-on-time)); a cancel request reaches it within a second on
PostgreSQL (rule 133 (cancel-reaches-body)).
A body that ignores its timeout is reported, and ``--exit-on-overrun`` drains the worker and
exits non-zero, losing no job: the runs beside it finish, the overrunning job is settled
``timed_out`` and retried by another process.
"""

from __future__ import annotations

import io
import time
from datetime import datetime

import pytest
from django.core.management import call_command
from django.db import connections
from django.utils import timezone

from django_ultjobs.models import AttemptRecord, Job
from django_ultjobs.models import Worker as WorkerRow
from django_ultjobs.operations import cancel_jobs
from django_ultjobs.worker.worker import EXIT_OVERRUN
from tests.conftest import WorkerProcesses, wait_until
from tests.testapp.jobs import async_stuck, async_stuck_timeout, clocked, overrunning, picky
from tests.testapp.models import RunLog

from .fleet import Fleet

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]


#: A worker whose heartbeat is the default's: a timeout or a cancel must not wait for it.
SLOW_BEAT = ("--heartbeat-interval", "10", "--visibility-timeout", "30")
#: How late the timer may deliver a run's cancel after its deadline, and a cooperative body
#: checking every 5 ms unwind (rule 130 (timeout-on-time)).
ON_TIME = 0.1
#: What the body's own stamps may add to that, or take from it: the start stamp is written just
#: after the body started and the end stamp after it unwound, each by a statement that may wait,
#: and on the shared two-core machine the body's thread may wait for a core (load 14 pushed one
#: interval past 1.2 s). Still a twentieth of the 10 s heartbeat the cancel once waited for; the
#: timer's delivery itself is held to ``ON_TIME``.
STAMP = 0.4


def db_now(alias: str) -> datetime:
    with connections[alias].cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        return cur.fetchone()[0]


def job_row(alias: str, job_id: int) -> Job:
    return Job.objects.using(alias).get(id=job_id)


def attempts(alias: str, job_id: int) -> list[tuple[int, str, str]]:
    return list(AttemptRecord.objects.using(alias).filter(job_id=job_id)
                .order_by("attempt", "id").values_list("attempt", "outcome", "worker_id"))


def _now(alias: str) -> datetime:
    """The database's clock (SQLite's is the host's, in UTC)."""
    return db_now(alias) if alias == "postgres" else timezone.now()


def _status(alias: str, job_id: int) -> str:
    return Job.objects.using(alias).get(id=job_id).status


def test_a_timeout_cancels_a_cooperative_body_within_one_heartbeat_interval(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """rules 55 (timeout-cancels) and 130 (timeout-on-time), across a process, on both engines:
    ``.using(timeout=1)`` on a body of 30 s; the body unwinds within 100 ms of its timeout (less
    than the 0.5 s interval), both attempts are recorded ``timed_out`` by the worker that ran
    them, and the job ends ``failed``."""
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("T", "--threads", "2")
    fleet.wait_registered(a)
    job = clocked.using(timeout=1.0, max_attempts=2).enqueue(label="t", seconds=30.0)
    fleet.wait(lambda: _status(alias, job.id) == "failed", 30, "the job to time out twice")
    assert attempts(alias, job.id) == [(1, "timed_out", a), (2, "timed_out", a)]
    for run in RunLog.objects.using(alias).filter(job_id=job.id):
        ran = (run.ended_at - run.started_at).total_seconds()
        assert run.label == "t:unwound"
        assert 1.0 - STAMP <= ran <= 1.0 + ON_TIME + STAMP, ran


def test_retry_on_non_retryable_and_expiry_end_in_their_states(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """rules 57 (retry-on-only), 58 (expired-never-runs), across a process, on both engines: the
    attempt rows each option promises."""
    fleet = Fleet(worker_processes, alias)
    stale = clocked.using(expires_in=0.1).enqueue(label="stale")
    expires_at = job_row(alias, stale.id).expires_at
    wait_until(lambda: _now(alias) > expires_at, message="the expiry to pass")
    retried = picky.enqueue("connection")
    bug = picky.enqueue("value")
    refused = picky.enqueue("non_retryable")
    a = fleet.start("R", "--threads", "2")
    ids = (stale.id, retried.id, bug.id, refused.id)
    fleet.wait(lambda: all(_status(alias, i) in ("failed", "cancelled") for i in ids), 30,
               "every job to end")
    assert [(n, o) for n, o, _ in attempts(alias, stale.id)] == [(1, "expired")]
    assert _status(alias, stale.id) == "cancelled"
    assert [o for _, o, _ in attempts(alias, retried.id)] == ["retrying", "retrying", "failed"]
    assert attempts(alias, bug.id) == [(1, "not_retried", a)]
    assert attempts(alias, refused.id) == [(1, "non_retryable", a)]
    assert not RunLog.objects.using(alias).filter(job_id=stale.id).exists()


def test_exit_on_overrun_drains_and_exits_non_zero_losing_no_job(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """rule 56 (overrun-reported): worker A runs a body that ignores its 0.5 s timeout beside a
    cooperative 1.5 s run and quick jobs. A logs ``run-overrunning`` (job and thread) and lists it
    on its row, then drains: the 1.5 s run finishes, A exits ``EXIT_OVERRUN`` with one line, no
    traceback. The overrunning job is settled ``timed_out`` and held back for a visibility timeout
    (its body died with A's process); worker B runs it again, and every job ends as it should.
    Both engines."""
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("A", "--threads", "4", "--exit-on-overrun", "--cancel-wait", "0.5",
                    "--grace-period", "10")
    fleet.wait_registered(a)
    proc_a = fleet.by_id.pop(a)  # its non-zero exit is the point: Fleet.wait must not trip
    stuck = overrunning.using(timeout=0.5).enqueue(seconds=5.0)
    beside = clocked.enqueue(label="beside", seconds=1.5)
    wait_until(lambda: RunLog.objects.using(alias).filter(job_id__in=[stuck.id, beside.id])
               .count() == 2, message="both bodies to start on A")
    quick = [clocked.enqueue(label=f"quick{i}") for i in range(10)]
    listed = wait_until(lambda: WorkerRow.objects.using(alias).get(id=a).overrunning,
                        timeout=20, message="A's row to list the overrunning run")
    assert [e["job_id"] for e in listed] == [stuck.id]
    assert proc_a.wait(30) == EXIT_OVERRUN
    out = worker_processes.logs()
    assert "Traceback" not in out
    assert "stopped by --exit-on-overrun" in out
    (logged,) = fleet.events("jobs.worker.run-overrunning", worker_id=a)
    assert logged["job_id"] == str(stuck.id) and logged["thread"].startswith("ultjobs-exec-")
    assert fleet.events("jobs.worker.exit-on-overrun", worker_id=a)
    # The run beside it had its grace period and finished on A.
    assert job_row(alias, beside.id).status == "succeeded"
    assert attempts(alias, beside.id) == [(1, "succeeded", a)]
    held = job_row(alias, stuck.id)
    assert (held.status, held.attempt) == ("queued", 1)
    assert held.visible_at > _now(alias)  # not before A's abandoned body could be gone
    assert attempts(alias, stuck.id) == [(1, "timed_out", a)]
    stopped = WorkerRow.objects.using(alias).get(id=a)
    assert stopped.stopped_at is not None and stopped.overrunning is None

    b = fleet.start("B", "--threads", "4")
    everything = [stuck.id, beside.id, *(q.id for q in quick)]
    fleet.wait(lambda: all(_status(alias, i) == "succeeded" for i in everything), 40,
               "every job to succeed")
    # On B the body overran again (its last attempt) and returned: its result is kept.
    assert attempts(alias, stuck.id) == [(1, "timed_out", a), (2, "timed_out", b)]
    assert job_row(alias, stuck.id).result == 2
    assert AttemptRecord.objects.using(alias).filter(job_id__in=everything,
                                                  outcome="succeeded").count() == 11





def _ran(alias: str, job_id: int) -> list[tuple[str, float]]:
    return [(r.label, (r.ended_at - r.started_at).total_seconds())
            for r in RunLog.objects.using(alias).filter(job_id=job_id, ended_at__isnull=False)]


def test_a_timeout_fires_within_100_ms_whatever_the_heartbeat_interval(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """rule 130 (timeout-on-time), both engines: at ``--heartbeat-interval 10``, three runs with
    a 1 s timeout, started 0, 0.3 and 1 s after the worker's first claim (the heartbeat asleep in
    its 10 s wait for all of them), each unwind within 100 ms of their deadline, on the timer,
    with no run reported overrunning."""
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("D", "--threads", "4", *SLOW_BEAT)
    fleet.wait_registered(a)
    jobs = []
    for pause in (0.0, 0.3, 0.7):
        time.sleep(pause)
        jobs.append(clocked.using(timeout=1.0, max_attempts=1).enqueue(label="d", seconds=30))
    fleet.wait(lambda: all(_status(alias, j.id) == "failed" for j in jobs), 20,
               "the three runs to time out")
    for job in jobs:
        assert attempts(alias, job.id) == [(1, "timed_out", a)]
        ((label, ran),) = _ran(alias, job.id)
        assert label == "d:unwound"
        assert 1.0 - STAMP <= ran <= 1.0 + ON_TIME + STAMP, (ran, worker_processes.logs())
    timed_out = fleet.events("jobs.worker.timed-out", worker_id=a)
    assert sorted(int(e["job_id"]) for e in timed_out) == sorted(j.id for j in jobs)
    assert all(e["seen"] == "by the timer" and float(e["late"]) < ON_TIME
               for e in timed_out), timed_out
    assert not fleet.events("jobs.worker.run-overrunning")


def test_exit_on_overrun_counts_the_cancel_wait_from_the_cancel_delivered(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """rules 56 (overrun-reported) and 131 (overrun-from-delivery), both engines: under
    ``--exit-on-overrun --cancel-wait 1`` at a 10 s heartbeat, a body that looks at its
    cancellation twice a second stops in time: never logged ``run-overrunning``, the worker runs
    on. A body that never looks is reported once it has ignored the delivered cancel for the
    whole second, and the worker exits 3."""
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("O", "--threads", "2", "--exit-on-overrun", "--cancel-wait", "1",
                    "--grace-period", "5", *SLOW_BEAT)
    fleet.wait_registered(a)
    proc_a = fleet.by_id.pop(a)
    slow = clocked.using(timeout=0.5, max_attempts=1).enqueue(label="slow", seconds=30,
                                                                every=0.5)
    wait_until(lambda: _status(alias, slow.id) == "failed", timeout=20,
               message="the slow checker to time out")
    time.sleep(1.5)  # past its cancel wait: a report would have come by now
    assert proc_a.poll() is None, worker_processes.logs()
    assert not fleet.events("jobs.worker.run-overrunning")
    assert attempts(alias, slow.id) == [(1, "timed_out", a)]

    stuck = overrunning.using(timeout=0.3, max_attempts=1).enqueue(seconds=4.0)
    assert proc_a.wait(30) == EXIT_OVERRUN
    (logged,) = fleet.events("jobs.worker.run-overrunning", worker_id=a)
    assert logged["job_id"] == str(stuck.id)
    # Reported a cancel wait after its deadline (the cancel's delivery), not before.
    assert 1.0 <= float(logged["overrun"]) <= 1.0 + 0.5, logged


def test_a_body_that_returns_past_its_deadline_ends_timed_out(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """rules 55 (timeout-cancels) and 132 (timeout-recorded), both engines: ``timeout=0.5`` and
    a body of ``time.sleep(1.5)`` that never looks, at a 10 s heartbeat: the job ``succeeded``
    with its result kept, its attempt ``timed_out``; the timeout does not pass unrecorded."""
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("R", "--threads", "2", *SLOW_BEAT)
    fleet.wait_registered(a)
    job = overrunning.using(timeout=0.5, max_attempts=1).enqueue(seconds=1.5)
    fleet.wait(lambda: _status(alias, job.id) == "succeeded", 20, "the body to return")
    assert attempts(alias, job.id) == [(1, "timed_out", a)]
    done = job_row(alias, job.id)
    assert done.result == 1
    assert "timed out" in done.last_error and "finished anyway" in done.last_error


def test_a_cancel_request_reaches_the_running_body_within_a_second(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """rule 133 (cancel-reaches-body): ``cancel_jobs`` and ``ultjobs cancel`` reach a running
    body within 1 s on PostgreSQL at a 10 s heartbeat (a notification to the worker holding
    it); on SQLite at the next heartbeat (1 s here). The reason reaches the attempt both
    ways."""
    pg = alias == "postgres"
    beat = SLOW_BEAT if pg else ("--heartbeat-interval", "1", "--visibility-timeout", "30")
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("C", "--threads", "2", *beat)
    fleet.wait_registered(a)
    by_code = clocked.enqueue(label="code", seconds=60)
    by_cli = clocked.enqueue(label="cli", seconds=60)
    wait_until(lambda: RunLog.objects.using(alias).filter(job_id__in=[by_code.id, by_cli.id])
               .count() == 2, message="both bodies to start")
    time.sleep(0.3)
    asked = _now(alias)
    cancel_jobs([by_code.id], reason="from code")
    call_command("ultjobs", "cancel", str(by_cli.id), "--reason", "from the CLI",
                 "--database", alias, stdout=io.StringIO(), stderr=io.StringIO())
    fleet.wait(lambda: all(_status(alias, j) == "cancelled" for j in (by_code.id, by_cli.id)),
               20, "both runs to be cancelled")
    within = 1.0 if pg else 1.0 + 0.3
    for job_id, reason in ((by_code.id, "from code"), (by_cli.id, "from the CLI")):
        log = RunLog.objects.using(alias).get(job_id=job_id)
        assert log.label.endswith(":unwound")
        assert (log.ended_at - asked).total_seconds() <= within, (log.ended_at, asked)
        assert attempts(alias, job_id) == [(1, "cancelled", a)]
        assert reason in job_row(alias, job_id).last_error


def test_async_bodies_get_their_deadline_and_a_cancel_request_as_sync_ones(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """rules 130 (timeout-on-time) and 133 (cancel-reaches-body) on the async lane, at a 10 s
    heartbeat: a body stuck in ``await asyncio.sleep(3600)`` with a 0.5 s timeout gets its cancel
    under 100 ms past its deadline and ends ``timed_out``; another one, asked to stop, ends
    ``cancelled`` within 1.5 s of the request on PostgreSQL (the request within 1 s, then its
    settle), at the heartbeat on SQLite (1 s here)."""
    pg = alias == "postgres"
    beat = SLOW_BEAT if pg else ("--heartbeat-interval", "1", "--visibility-timeout", "30")
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("A", "--async-concurrency", "4", *beat)
    fleet.wait_registered(a)
    timed = async_stuck_timeout.enqueue()
    stuck = async_stuck.enqueue()
    fleet.wait(lambda: _status(alias, timed.id) == "failed"
               and _status(alias, stuck.id) == "running", 20, "the timed run to time out")
    assert attempts(alias, timed.id) == [(1, "timed_out", a)]
    ((event,),) = [fleet.events("jobs.worker.timed-out", job_id=timed.id)]
    assert event["seen"] == "by the timer" and float(event["late"]) < ON_TIME, event
    asked = time.monotonic()
    cancel_jobs([stuck.id], reason="stop it")
    fleet.wait(lambda: _status(alias, stuck.id) == "cancelled", 20, "the stuck run to stop")
    assert time.monotonic() - asked <= (1.5 if pg else 1.0 + 0.8)
    assert attempts(alias, stuck.id) == [(1, "cancelled", a)]
