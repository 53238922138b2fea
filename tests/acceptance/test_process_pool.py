"""Acceptance: ``runjobworker --pool process`` with real worker processes (rules 140 (hard-stop),
141 (cap-without-cooperation), 142 (child-death-unburned), 143 (children-die-with-parent)).

Bodies that never look at their cancellation are ended by killing their child, on both engines;
children killed from outside lose nothing; a worker stopped past its visibility timeout never
lets its capped body overlap the next holder's; a worker killed takes its children with it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from benchmarks.chaos.process_pool import alive, children_of
from django_ultjobs.models import AttemptRecord, Job
from django_ultjobs.models import Worker as WorkerRow
from django_ultjobs.operations import cancel_jobs
from tests.conftest import WorkerProcesses, wait_until
from tests.testapp.pool_jobs import (
    async_whose_pid,
    checks_then_stops,
    sleep_deaf,
    spin,
    stamping,
    whose_pid,
)

from .fleet import Fleet

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]

PROCESS = ("--pool", "process")


def _job(alias: str, job_id: int) -> Job:
    return Job.objects.using(alias).get(id=job_id)


def _status(alias: str, job_id: int) -> str:
    return _job(alias, job_id).status


def _outcomes(alias: str, job_id: int) -> list[str]:
    return list(AttemptRecord.objects.using(alias).filter(job_id=job_id)
                .order_by("attempt", "id").values_list("outcome", flat=True))




def test_a_busy_loop_past_its_timeout_is_killed_and_the_worker_runs_the_next_job(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """rule 140 (hard-stop), both engines: ``while True: pass`` with ``timeout=1`` under one
    child ends ``timed_out`` (its child killed ``--cancel-wait`` after the cancel), and the same
    worker runs the next job in a fresh child."""
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("K", *PROCESS, "--processes", "1", "--cancel-wait", "0.5")
    fleet.wait_registered(a)
    stuck = spin.enqueue()
    after = whose_pid.enqueue()
    fleet.wait(lambda: _status(alias, after.id) == "succeeded", 15, "the next job to run")
    assert _status(alias, stuck.id) == "failed"
    assert _outcomes(alias, stuck.id) == ["timed_out"]
    (killed,) = fleet.events("jobs.worker.child-killed", worker_id=a)
    assert killed["job_id"] == str(stuck.id) and killed["cause"] == "timed_out"
    assert _job(alias, after.id).result != int(killed["pid"])  # a fresh child ran it
    assert not fleet.events("jobs.worker.run-overrunning")


def test_a_cancel_request_ends_a_deaf_body_by_killing_its_child(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """rule 140 (hard-stop), both engines: a body sleeping through its cancellation, cancelled on
    request, ends ``cancelled`` about ``--cancel-wait`` after the request reached the worker,
    and no overrun is reported."""
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("C", *PROCESS, "--processes", "1", "--cancel-wait", "0.5")
    fleet.wait_registered(a)
    deaf = sleep_deaf.enqueue(seconds=60.0)
    fleet.wait(lambda: _status(alias, deaf.id) == "running", 10, "the body to start")
    # The worker's row says which child runs it (the admin's in-flight page reads it).
    runners = fleet.wait(lambda: WorkerRow.objects.using(alias).get(id=a).runners, 5,
                         "the row to name the child")
    (server,) = children_of(fleet.pid(a))
    assert runners == {str(deaf.id): runners[str(deaf.id)]}
    assert runners[str(deaf.id)] in children_of(server)
    time.sleep(0.3)
    asked = time.monotonic()
    cancel_jobs([deaf.id], reason="stop it")
    fleet.wait(lambda: _status(alias, deaf.id) == "cancelled", 10, "the cancel")
    assert time.monotonic() - asked < 4.0
    assert _outcomes(alias, deaf.id) == ["cancelled"]
    (killed,) = fleet.events("jobs.worker.child-killed", worker_id=a)
    assert killed["cause"] == "cancel_requested"


def test_exit_on_overrun_never_fires_when_the_kill_ends_the_body(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """rules 140 (hard-stop) and 56 (overrun-reported), PostgreSQL and SQLite: under the process
    pool a body that ignores its timeout is killed ``--cancel-wait`` after its cancel, and one
    that stops within it stops: neither overruns, so ``--exit-on-overrun`` never fires and the
    worker goes on running jobs."""
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("O", *PROCESS, "--processes", "2", "--cancel-wait", "0.5",
                    "--exit-on-overrun")
    fleet.wait_registered(a)
    stuck = spin.enqueue()
    polite = checks_then_stops.using(timeout=0.5).enqueue(seconds=30.0)
    fleet.wait(lambda: _status(alias, stuck.id) == "failed"
               and _status(alias, polite.id) == "failed", 15, "both runs to time out")
    assert _outcomes(alias, stuck.id) == ["timed_out"]
    assert _outcomes(alias, polite.id) == ["timed_out"]
    later = whose_pid.enqueue()
    fleet.wait(lambda: _status(alias, later.id) == "succeeded", 10, "the next job")
    assert fleet.by_id[a].poll() is None
    assert not fleet.events("jobs.worker.run-overrunning")
    assert not fleet.events("jobs.worker.exit-on-overrun")
    assert len(fleet.events("jobs.worker.child-killed", worker_id=a)) == 1


def test_children_killed_from_outside_lose_nothing(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:
    """rule 142 (child-death-unburned), PostgreSQL: children SIGKILLed under their bodies (as
    the OOM killer would) fail nothing; each run is handed back unburned (``interrupted``), a
    fresh child replaces the dead one, and every job succeeds."""
    alias = pg_alias
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("S", *PROCESS, "--processes", "2")
    fleet.wait_registered(a)
    jobs = [whose_pid.using(max_attempts=1).enqueue(seconds=0.3) for _ in range(12)]
    killed = 0
    deadline = time.monotonic() + 6
    (server,) = children_of(fleet.pid(a))  # the fork server; the children are its own
    while killed < 3 and time.monotonic() < deadline:
        children = [pid for pid in children_of(server) if alive(pid)]
        running = Job.objects.using(alias).filter(id__in=[j.id for j in jobs],
                                                  status="running").count()
        if running == 2 and len(children) == 2:
            os.kill(max(children), signal.SIGKILL)
            killed += 1
            time.sleep(0.4)
        time.sleep(0.05)
    fleet.wait(lambda: all(_status(alias, j.id) == "succeeded" for j in jobs), 20,
               "every job to succeed")
    died = fleet.events("jobs.worker.child-died", worker_id=a)
    assert died, "no child died under a body"
    interrupted = AttemptRecord.objects.using(alias).filter(
        job_id__in=[j.id for j in jobs], outcome="interrupted").count()
    assert interrupted == len(died)


def test_a_child_is_replaced_after_max_jobs_per_child_and_async_bodies_stay_home(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """``--max-jobs-per-child 2`` with one child: six jobs run in three children, two each;
    an ``async def`` body runs on the worker's own event loop, not in a child. Both engines."""
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("M", *PROCESS, "--processes", "1", "--max-jobs-per-child", "2")
    fleet.wait_registered(a)
    jobs = [whose_pid.enqueue() for _ in range(6)]
    home = async_whose_pid.enqueue()
    fleet.wait(lambda: all(_status(alias, j.id) == "succeeded" for j in [*jobs, home]), 20,
               "every job to succeed")
    pids = [_job(alias, j.id).result for j in jobs]
    assert sorted(pids.count(p) for p in set(pids)) == [2, 2, 2]
    assert fleet.pid(a) not in pids
    assert _job(alias, home.id).result == fleet.pid(a)
    assert len(fleet.events("jobs.worker.child-recycled", worker_id=a)) >= 2


def _stamps(path: Path) -> dict[int, list[float]]:
    """The wall times each pid stamped, in order."""
    found: dict[int, list[float]] = {}
    for line in path.read_text().splitlines():
        _, pid, at = line.split()
        found.setdefault(int(pid), []).append(float(at))
    return found


@pytest.mark.parametrize("takes_alarm", [False, True], ids=["plain", "takes-sigalrm"])
def test_a_stopped_worker_never_lets_its_capped_body_overlap_the_next_holder(
        pg_alias: str, worker_processes: WorkerProcesses, tmp_path: Path, takes_alarm: bool
        ) -> None:
    """rule 141 (cap-without-cooperation), PostgreSQL: worker A's child runs a ``concurrency=1``
    body that never checks its cancellation; A is SIGSTOPped past the visibility timeout (2 s),
    so nothing renews the run's lease or slot. Its child ends the body before either lapses;
    worker B then takes the slot and runs the job again. The stamps both bodies wrote never
    overlap: A's last comes before B's first. ``takes-sigalrm``: the body ignores ``SIGALRM``
    and cancels the interval timer first, which disarmed a guard built on them."""
    alias = pg_alias
    path = tmp_path / "stamps"
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("P", *PROCESS, "--processes", "1")
    fleet.wait_registered(a)
    job = stamping.enqueue(str(path), "s", 6.0, takes_alarm)
    wait_until(lambda: path.exists() and path.stat().st_size > 0, message="A's body to start")
    os.kill(fleet.pid(a), signal.SIGSTOP)
    try:
        # B's run of it may be short; A's body, left alone, would stamp for 6 s.
        Job.objects.using(alias).filter(id=job.id).update(args=[str(path), "s", 0.5])
        b = fleet.start("Q", "--threads", "2")
        fleet.wait(lambda: _status(alias, job.id) == "succeeded", 15, "B to run the job")
    finally:
        os.kill(fleet.pid(a), signal.SIGCONT)
    stamps = _stamps(path)
    assert len(stamps) == 2, stamps.keys()
    first, second = sorted(stamps.values(), key=lambda times: times[0])
    assert first[-1] < second[0], (first[-1], second[0])
    # A's body was ended well before B's could start: the guard, not B's claim, stopped it.
    assert second[0] - first[-1] > 0.1
    assert [w for w in AttemptRecord.objects.using(alias).filter(job_id=job.id)
            .order_by("attempt", "id").values_list("worker_id", flat=True)][-1] == b


def test_a_killed_worker_takes_its_children_with_it(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:
    """rule 143 (children-die-with-parent), PostgreSQL: worker A, SIGKILLed while two children
    run bodies that never return, leaves no process behind (its fork server and children end
    within a second), and worker B runs both jobs again once their leases lapse."""
    alias = pg_alias
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("X", *PROCESS, "--processes", "2")
    fleet.wait_registered(a)
    jobs = [whose_pid.using(max_attempts=3).enqueue(seconds=30.0) for _ in range(2)]
    fleet.wait(lambda: all(_status(alias, j.id) == "running" for j in jobs), 10,
               "both bodies to start")
    (server,) = children_of(fleet.pid(a))
    children = children_of(server)
    assert len(children) == 2
    worker_processes.kill(fleet.by_id[a])
    wait_until(lambda: not any(alive(pid) for pid in [server, *children]), timeout=2.0,
               message="the fork server and the children to end")
    # The leases lapse as a dead worker's do; B runs the jobs again, quickly this time.
    Job.objects.using(alias).filter(id__in=[j.id for j in jobs]).update(
        kwargs={"seconds": 0.0})
    fleet.start("Y", *PROCESS, "--processes", "2")
    fleet.wait(lambda: all(_status(alias, j.id) == "succeeded" for j in jobs), 15,
               "B to run both jobs")
    assert all(_job(alias, j.id).result not in children for j in jobs)


def test_a_drain_past_its_grace_period_kills_a_deaf_body_and_hands_its_job_back(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:
    """rule 140 (hard-stop), PostgreSQL: SIGTERM with a body sleeping through its cancellation;
    past ``--grace-period`` and ``--cancel-wait`` its child is killed, the job is handed back at
    once (``interrupted``, unburned, runnable now: no body of it runs on), and the worker exits
    0 leaving no process behind."""
    alias = pg_alias
    fleet = Fleet(worker_processes, alias)
    a = fleet.start("T", *PROCESS, "--processes", "1", "--grace-period", "0.5",
                    "--cancel-wait", "0.5")
    fleet.wait_registered(a)
    deaf = sleep_deaf.enqueue(seconds=60.0)
    fleet.wait(lambda: _status(alias, deaf.id) == "running", 10, "the body to start")
    (server,) = children_of(fleet.pid(a))
    children = children_of(server)
    stopping = time.monotonic()
    fleet.by_id[a].send_signal(signal.SIGTERM)
    assert fleet.by_id[a].wait(10) == 0
    assert time.monotonic() - stopping < 5.0
    row = _job(alias, deaf.id)
    assert (row.status, row.attempt) == ("queued", 0)
    assert _outcomes(alias, deaf.id) == ["interrupted"]
    (killed,) = fleet.events("jobs.worker.child-killed", worker_id=a)
    assert killed["cause"] == "worker_shutdown"
    assert not any(alive(pid) for pid in [server, *children])
