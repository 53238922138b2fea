"""Acceptance: periodic ticks from real worker processes, one of them SIGKILLed (rules 60, 61).

Every worker process runs ``every_second`` (``@job(every=1)``, tests/periodicapp) and a
scheduler thread; none leads. Over about twenty seconds one worker is SIGKILLed and started
again. Each tick must be one job row (never two), every tick of the window must be there (the
survivors keep ticking; at most one tick per kill may be missed), each run starts no earlier
than its tick, and each tick's job succeeds with one successful run.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from django.db.models import Count

from django_ultjobs.models import AttemptRecord, Job, JobSchedule
from django_ultjobs.store import get_store
from tests.conftest import WorkerProcesses

from .fleet import Fleet

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]

PERIODIC = {"ULTJOBS_TEST_PERIODIC": "1"}
NAME = "every_second"


def db_now(alias: str) -> datetime:
    """The database's clock (the one ticks and claims are stamped with), on either engine."""
    return get_store(alias).db_now()


def _ticks(alias: str, until: datetime) -> list[datetime]:
    return list(Job.objects.using(alias).filter(name=NAME, scheduled_for__lte=until)
                .order_by("scheduled_for").values_list("scheduled_for", flat=True))


def _run_fleet_with_a_kill(alias: str, procs: WorkerProcesses, workers: int,
                           seconds: float) -> tuple[Fleet, datetime, datetime, int]:
    """Start ``workers`` processes, SIGKILL the one sending the ticks a third of the way in and
    start another in its place; return the fleet, the window of ticks to judge and the kills."""
    fleet = Fleet(procs, alias)
    ids = [fleet.start(f"S{i}", "--threads", "2", env=PERIODIC) for i in range(workers)]
    fleet.wait_registered(*ids)
    fleet.wait(lambda: JobSchedule.objects.using(alias).filter(name=NAME).exists(), 30,
               "the schedule to be registered")
    begun = db_now(alias)
    time.sleep(seconds / 3)  # let ticks happen; the judged window starts after the first tick
    # Kill the worker that sent the latest tick: whichever is first each second keeps being
    # first, so it is the one whose death would show if another had to be elected.
    latest = Job.objects.using(alias).filter(name=NAME).latest("scheduled_for")
    procs.kill(fleet.by_id[latest.enqueued_by.removeprefix("schedule:")])
    time.sleep(1.5)
    fleet.wait_registered(fleet.start("S-again", "--threads", "2", env=PERIODIC))
    end = begun + timedelta(seconds=seconds)
    fleet.wait(lambda: db_now(alias) > end + timedelta(seconds=1), seconds + 30,
               "the window to pass")
    return fleet, begun, end, 1


def _judge(alias: str, fleet: Fleet, begun: datetime, end: datetime, kills: int) -> None:
    fleet.wait(lambda: not Job.objects.using(alias).filter(
        name=NAME, scheduled_for__lte=end).exclude(status="succeeded").exists(), 30,
        "every tick's job to succeed")
    ticks = [t for t in _ticks(alias, end) if t > begun]
    # Rule 60: one row per tick (the unique index), and no tick of the window missing beyond
    # one per kill (here the survivors keep ticking, so none is expected).
    assert len(ticks) == len(set(ticks))
    assert ticks, "no tick was enqueued"
    expected = {ticks[0] + timedelta(seconds=i)
                for i in range(int((ticks[-1] - ticks[0]).total_seconds()) + 1)}
    missing = sorted(expected - set(ticks))
    assert len(missing) <= kills, f"missing ticks: {missing}"
    assert len(ticks) >= (end - begun).total_seconds() - 2 - kills
    jobs = Job.objects.using(alias).filter(name=NAME, scheduled_for__in=ticks)
    for job in jobs:
        # Rule 61: visible at its tick, so never claimed before it (database clock).
        assert job.claimed_at >= job.scheduled_for
        assert job.args == [] and job.kwargs == {}
    # One successful run per tick; a second attempt only after a lease the kill lost.
    succeeded = (AttemptRecord.objects.using(alias).filter(job__in=jobs, outcome="succeeded")
                 .values("job").annotate(n=Count("id")))
    assert {row["n"] for row in succeeded} == {1}
    assert len(succeeded) == len(ticks)
    others = AttemptRecord.objects.using(alias).filter(job__in=jobs).exclude(outcome="succeeded")
    assert set(others.values_list("outcome", flat=True)) <= {"lease_lost"}
    # The killed sender's ticks were taken over by a survivor at once: nobody had to lead.
    senders = set(jobs.values_list("enqueued_by", flat=True))
    assert len(senders) >= 2, senders


def test_three_workers_one_sigkilled_enqueue_each_tick_once_on_postgresql(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:  # rules 60, 61
    fleet, begun, end, kills = _run_fleet_with_a_kill(pg_alias, worker_processes, 3, 20)
    _judge(pg_alias, fleet, begun, end, kills)


def test_two_workers_one_sigkilled_enqueue_each_tick_once_on_sqlite(
        worker_processes: WorkerProcesses) -> None:  # rules 60, 61
    alias = "default"
    fleet, begun, end, kills = _run_fleet_with_a_kill(alias, worker_processes, 2, 15)
    _judge(alias, fleet, begun, end, kills)


def test_a_worker_started_with_no_schedule_enqueues_no_tick(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:  # rule 60
    fleet = Fleet(worker_processes, pg_alias)
    quiet = fleet.start("quiet", "--no-schedule", env=PERIODIC)
    fleet.wait_registered(quiet)
    started = db_now(pg_alias)
    fleet.wait(lambda: db_now(pg_alias) > started + timedelta(seconds=2.5), 10, "3 seconds")
    assert not JobSchedule.objects.using(pg_alias).filter(name=NAME).exists()
    assert not Job.objects.using(pg_alias).filter(name=NAME).exists()
    # A worker that schedules takes over; the quiet one runs the ticks too.
    loud = fleet.start("loud", env=PERIODIC)
    fleet.wait(lambda: Job.objects.using(pg_alias).filter(name=NAME, status="succeeded")
               .count() >= 3, 20, "three ticks to run")
    senders = set(Job.objects.using(pg_alias).filter(name=NAME)
                  .values_list("enqueued_by", flat=True))
    assert senders == {f"schedule:{loud}"}
