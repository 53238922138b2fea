"""The scheduler thread's steps on an injected clock, on both engines (rules 60 (tick-once) to
63 (fleet-wide-pause)).

``Scheduler.step()`` is driven by hand: no thread, no sleep. Two schedulers on one database are
two workers; neither leads, and each tick is enqueued once. Missed ticks follow the catch-up
policy; a paused schedule gets no tick; the built-in prune job is scheduled unless turned off.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.test.utils import override_settings

from django_ultjobs import job
from django_ultjobs.jobs.periodic import PRUNE_JOB, periodic_jobs
from django_ultjobs.models import Job, JobSchedule
from django_ultjobs.operations import pause_schedules
from django_ultjobs.store import get_store
from django_ultjobs.testing import unregister
from django_ultjobs.worker.scheduler import AFTER_TICK, MAX_SLEEP, Scheduler
from tests.doubles import FakeClock

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

NO_PRUNE = {**settings.ULTJOBS, "PRUNE_SCHEDULE": None}


@pytest.fixture
def start(clock: FakeClock) -> datetime:
    """The clock moved to a whole minute plus 10 s (ticks fall on whole minutes)."""
    clock.now = clock.now.replace(second=10, microsecond=0)
    return clock.now


@pytest.fixture
def minutely() -> Iterator[str]:
    with override_settings(ULTJOBS=NO_PRUNE):
        @job(name="minutely", every=60)
        def minutely_job() -> None: ...
        try:
            yield "minutely"
        finally:
            unregister("minutely")


def scheduler(alias: str, clock: FakeClock, worker: str = "w1") -> Scheduler:
    return Scheduler(store=get_store(alias, clock=clock), worker_id=worker, clock=clock)


def ticks(alias: str, name: str) -> list[datetime]:
    return list(Job.objects.using(alias).filter(name=name).order_by("scheduled_for")
                .values_list("scheduled_for", flat=True))


# rule 60 (tick-once)
def test_a_tick_is_enqueued_when_it_comes_and_the_step_says_when_the_next_is(
        alias: str, clock: FakeClock, start: datetime, minutely: str) -> None:
    one = scheduler(alias, clock)
    # The schedule begins now: nothing before it. The step sleeps until the tick (at most
    # MAX_SLEEP at a time), and a step that wakes before it sends nothing.
    assert one.step() == pytest.approx(MAX_SLEEP + AFTER_TICK)
    clock.advance(MAX_SLEEP)
    assert ticks(alias, minutely) == []
    assert one.step() == pytest.approx(20 + AFTER_TICK)
    clock.advance(20 + AFTER_TICK)
    assert ticks(alias, minutely) == []
    one.step()
    first = start + timedelta(seconds=50)
    assert ticks(alias, minutely) == [first]
    job_row = Job.objects.using(alias).get(name=minutely)
    assert job_row.enqueued_by == "schedule:w1"


# rule 60 (tick-once)
def test_two_workers_step_through_the_same_ticks_and_each_is_enqueued_once(
        alias: str, clock: FakeClock, start: datetime, minutely: str) -> None:
    a, b = scheduler(alias, clock, "a"), scheduler(alias, clock, "b")
    a.step()
    b.step()
    for _ in range(5):
        clock.advance(60)
        b.step()
        a.step()
    got = ticks(alias, minutely)
    assert got == [start + timedelta(seconds=50 + 60 * i) for i in range(5)]
    assert set(Job.objects.using(alias).values_list("enqueued_by", flat=True)) == {
        "schedule:b"}


# rule 62 (catch-up-policy)
def test_a_worker_back_after_missed_ticks_enqueues_the_latest_only(
        alias: str, clock: FakeClock, start: datetime, minutely: str) -> None:
    scheduler(alias, clock).step()
    clock.advance(60 * 30)  # the fleet was down for half an hour
    scheduler(alias, clock, "w2").step()
    assert ticks(alias, minutely) == [start + timedelta(seconds=50 + 60 * 29)]


def test_catch_up_all_and_none(alias: str, clock: FakeClock, start: datetime) -> None:
    with override_settings(ULTJOBS=NO_PRUNE):  # rule 62 (catch-up-policy)
        @job(name="every_all", every=60, catch_up="all")
        def every_all() -> None: ...

        @job(name="every_none", every=60, catch_up="none")
        def every_none() -> None: ...
        try:
            scheduler(alias, clock).step()
            clock.advance(60 * 5)
            scheduler(alias, clock, "w2").step()
            assert len(ticks(alias, "every_all")) == 5
            assert ticks(alias, "every_none") == []
            # On time (2 s after the tick, as a worker running all along sends it): "none"
            # runs it.
            clock.advance(52)
            scheduler(alias, clock, "w3").step()
            assert len(ticks(alias, "every_none")) == 1
        finally:
            unregister("every_all")
            unregister("every_none")


# rule 63 (fleet-wide-pause)
def test_a_paused_schedule_gets_no_tick_from_any_worker(
        alias: str, clock: FakeClock, start: datetime, minutely: str) -> None:
    a = scheduler(alias, clock)
    a.step()
    pause_schedules([minutely], using=alias)
    for _ in range(3):
        clock.advance(60)
        # Told the schedule is paused, it sleeps towards the next tick: no statement meanwhile.
        assert a.step() == pytest.approx(MAX_SLEEP + AFTER_TICK)
        scheduler(alias, clock, "fresh").step()
    assert ticks(alias, minutely) == []


def test_the_prune_job_is_scheduled_daily_unless_turned_off(
        alias: str, clock: FakeClock) -> None:
    assert PRUNE_JOB in periodic_jobs()
    assert periodic_jobs()[PRUNE_JOB].schedule.describe() == "0 3 * * *"
    clock.now = datetime(2026, 6, 1, 2, 59, 59, tzinfo=UTC)
    one = scheduler(alias, clock)
    assert one.step() == pytest.approx(1 + AFTER_TICK)
    clock.advance(1 + AFTER_TICK)
    one.step()
    (pruned,) = Job.objects.using(alias).filter(name=PRUNE_JOB)
    assert pruned.scheduled_for == datetime(2026, 6, 1, 3, tzinfo=UTC)
    with override_settings(ULTJOBS={**settings.ULTJOBS, "PRUNE_SCHEDULE": None}):
        assert PRUNE_JOB not in periodic_jobs()
    with override_settings(ULTJOBS={**settings.ULTJOBS, "RETENTION_DAYS": None}):
        assert PRUNE_JOB not in periodic_jobs()
    with override_settings(ULTJOBS={**settings.ULTJOBS, "PRUNE_SCHEDULE": "*/10 * * * *",
                                    "PRUNE_TIMEZONE": "Europe/Paris"}):
        assert periodic_jobs()[PRUNE_JOB].schedule.zone.key == "Europe/Paris"
    assert JobSchedule.objects.using(alias).filter(name=PRUNE_JOB).exists()
