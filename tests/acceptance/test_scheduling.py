"""Acceptance: periodic ticks from real worker processes, one of them SIGKILLed
(rules 60 (tick-once), 61 (tick-on-time)).

Every worker process runs ``every_second`` (``@job(every=1)``, tests/periodicapp) and a
scheduler thread; none leads. Over about twenty seconds one worker is SIGKILLed and started
again. Each tick must be one job row (never two), every tick of the window must be there (the
survivors keep ticking; at most one tick per kill may be missed), each run starts no earlier
than its tick, and each tick's job succeeds with one successful run.

Then two workers running a periodic job of each catch-up policy (tests/catchupapp), one of them
with its wall clock stepped by tests/clockstep: each scheduled instant still gets exactly one
job, enqueued once its instant came on the database's clock (rule 102 (database-clock-ticks)).
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.db.models import Count, F

from django_ultjobs.models import AttemptRecord, Job, JobSchedule
from django_ultjobs.store import get_store
from tests.conftest import REPO, WorkerProcesses

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
    # Rule 60 (tick-once): one row per tick (the unique index), and no tick of the window missing
    # beyond one per kill (here the survivors keep ticking, so none is expected).
    assert len(ticks) == len(set(ticks))
    assert ticks, "no tick was enqueued"
    expected = {ticks[0] + timedelta(seconds=i)
                for i in range(int((ticks[-1] - ticks[0]).total_seconds()) + 1)}
    missing = sorted(expected - set(ticks))
    assert len(missing) <= kills, f"missing ticks: {missing}"
    assert len(ticks) >= (end - begun).total_seconds() - 2 - kills
    jobs = Job.objects.using(alias).filter(name=NAME, scheduled_for__in=ticks)
    for job in jobs:
        # Rule 61 (tick-on-time): visible at its tick, so never claimed before it (database clock).
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


# rules 60 (tick-once), 61 (tick-on-time)
def test_three_workers_one_sigkilled_enqueue_each_tick_once_on_postgresql(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:
    fleet, begun, end, kills = _run_fleet_with_a_kill(pg_alias, worker_processes, 3, 20)
    _judge(pg_alias, fleet, begun, end, kills)


def test_two_workers_one_sigkilled_enqueue_each_tick_once_on_sqlite(
        worker_processes: WorkerProcesses) -> None:  # rules 60 (tick-once), 61 (tick-on-time)
    alias = "default"
    fleet, begun, end, kills = _run_fleet_with_a_kill(alias, worker_processes, 2, 15)
    _judge(alias, fleet, begun, end, kills)


def test_a_worker_started_with_no_schedule_enqueues_no_tick(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:  # rule 60 (tick-once)
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


#: The periodic jobs of tests/catchupapp, one per catch-up policy, and their intervals (s).
CATCH_UP_JOBS = {"tick_latest": 1, "tick_none": 2, "tick_all": 1}
#: tests/clockstep: first on a process's PYTHONPATH, it steps that process's wall clock.
CLOCK_STEP = REPO / "tests" / "clockstep"


def _stepped_env(step_file: Path) -> dict[str, str]:
    """A worker process whose wall clock is off by the seconds ``step_file`` holds."""
    return {"ULTJOBS_TEST_CATCH_UP": "1", "ULTJOBS_TEST_CLOCK_STEP": str(step_file),
            "PYTHONPATH": os.pathsep.join([str(CLOCK_STEP), str(REPO),
                                           os.environ.get("PYTHONPATH", "")])}


def _per_instant(alias: str, name: str, every: int, begun: datetime, end: datetime
                 ) -> tuple[list[datetime], dict[datetime, int]]:
    """The instants of (begun, end] of job ``name`` with no job row, and those with more than
    one (instant: rows)."""
    rows = Job.objects.using(alias).filter(name=name, scheduled_for__gt=begun,
                                           scheduled_for__lte=end)
    counts = dict(rows.values_list("scheduled_for").annotate(n=Count("id")))
    first = begun.replace(microsecond=0) + timedelta(seconds=every - begun.second % every)
    instants = [first + timedelta(seconds=every * i)
                for i in range(int((end - first).total_seconds()) // every + 1)]
    return ([t for t in instants if t not in counts],
            {t: n for t, n in counts.items() if n != 1})


def test_a_worker_whose_wall_clock_steps_loses_no_tick_of_any_policy_on_postgresql(
        pg_alias: str, worker_processes: WorkerProcesses, tmp_path: Path) -> None:
    # rules 60 (tick-once), 61 (tick-on-time), 62 (catch-up-policy), 102 (database-clock-ticks)
    """Two workers; one's wall clock is stepped 30 s ahead, then 30 s behind, then back, between
    its syncs. Each scheduled instant of each catch-up policy gets exactly one job, enqueued
    once its instant came on the database's clock, and each runs once."""
    alias = pg_alias
    step_file = tmp_path / "clock-step"
    step_file.write_text("0")
    fleet = Fleet(worker_processes, alias)
    steady = fleet.start("steady", "--threads", "2", env={"ULTJOBS_TEST_CATCH_UP": "1"})
    stepped = fleet.start("stepped", "--threads", "2", env=_stepped_env(step_file))
    fleet.wait_registered(steady, stepped)
    fleet.wait(lambda: JobSchedule.objects.using(alias).filter(name__in=CATCH_UP_JOBS).count()
               == len(CATCH_UP_JOBS), 30, "the schedules to be registered")
    fleet.wait(lambda: Job.objects.using(alias).filter(name="tick_latest").count() >= 2, 30,
               "the ticks to flow")
    begun = db_now(alias)
    for offset, until in (("30", 8), ("-30", 16), ("0", 32)):
        step_file.write_text(offset)
        fleet.wait(lambda until=until: db_now(alias) > begun + timedelta(seconds=until),
                   until + 30, f"the clock step {offset} to last")
    end = begun + timedelta(seconds=30)
    found = {name: _per_instant(alias, name, every, begun, end)
             for name, every in CATCH_UP_JOBS.items()}
    assert all(missing == [] and doubled == {} for missing, doubled in found.values()), {
        name: f"{len(missing)} instants with no job (the first {missing[:3]}), doubled "
              f"{doubled}" for name, (missing, doubled) in found.items()}
    jobs = Job.objects.using(alias).filter(name__in=CATCH_UP_JOBS, scheduled_for__gt=begun,
                                           scheduled_for__lte=end)
    # Rule 61 (tick-on-time), and the statement's clock: no tick enqueued before it came, none run
    # before it.
    assert not jobs.filter(created_at__lt=F("scheduled_for")).exists()
    fleet.wait(lambda: not jobs.exclude(status="succeeded").exists(), 30,
               "every tick's job to succeed")
    assert not jobs.filter(claimed_at__lt=F("scheduled_for")).exists()
    # The stepped worker took part: it sent ticks the database kept while its clock was off.
    senders = set(jobs.values_list("enqueued_by", flat=True))
    assert f"schedule:{stepped}" in senders, senders
    assert not fleet.events("jobs.scheduler.failed")
