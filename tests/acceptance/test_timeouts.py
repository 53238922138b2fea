"""Acceptance: run timeouts (rules 55 (timeout-cancels), 56 (overrun-reported)) with real
``runjobworker`` processes.

A cooperative body is cancelled at its timeout, within one heartbeat interval, on both engines.
A body that ignores its timeout is reported, and ``--exit-on-overrun`` drains the worker and
exits non-zero, losing no job: the runs beside it finish, the overrunning job is settled
``timed_out`` and retried by another process.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from django.db import connections
from django.utils import timezone

from django_ultjobs.models import AttemptRecord, Job
from django_ultjobs.models import Worker as WorkerRow
from django_ultjobs.worker.worker import EXIT_OVERRUN
from tests.conftest import WorkerProcesses, wait_until
from tests.testapp.jobs import clocked, overrunning, picky
from tests.testapp.models import RunLog

from .fleet import Fleet

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]

HEARTBEAT = 0.5


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
    """rule 55 (timeout-cancels), across a process, on both engines: ``.using(timeout=1)`` on a body
    of 30 s; the body unwinds within one heartbeat interval of its timeout, both attempts are
    recorded ``timed_out`` by the worker that ran them, and the job ends ``failed``."""
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("T", "--threads", "2")
    fleet.wait_registered(a)
    job = clocked.using(timeout=1.0, max_attempts=2).enqueue(label="t", seconds=30.0)
    fleet.wait(lambda: _status(alias, job.id) == "failed", 30, "the job to time out twice")
    assert attempts(alias, job.id) == [(1, "timed_out", a), (2, "timed_out", a)]
    for run in RunLog.objects.using(alias).filter(job_id=job.id):
        ran = (run.ended_at - run.started_at).total_seconds()
        assert run.label == "t:unwound"
        assert 1.0 - 0.05 <= ran <= 1.0 + HEARTBEAT, ran


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


