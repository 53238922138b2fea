"""Schedulers whose clocks disagree with the database's, on both engines (rules 60 (tick-once) to
62 (catch-up-policy), 102 (database-clock-ticks)).

Two schedulers share one database whose clock is the injected ``FakeClock``; one reckons the
database's clock right, the other 30 s ahead or behind, steadily or stepping mid-run (an NTP
correction between two syncs). Each is stepped when its last step said its next tick is due,
as its thread would be. Whatever the skewed one reckons, every tick of every ``catch_up``
policy is enqueued exactly once, never before the database's clock reaches it, and the shared
cursor never passes the database's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.conf import settings
from django.db.models import Count, F
from django.test.utils import override_settings

from django_ultjobs import job
from django_ultjobs.models import Job, JobSchedule
from django_ultjobs.store import get_store
from django_ultjobs.testing import unregister
from django_ultjobs.worker import scheduler as scheduler_module
from django_ultjobs.worker.scheduler import Scheduler
from tests.doubles import FakeClock

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

NO_PRUNE = {**settings.ULTJOBS, "PRUNE_SCHEDULE": None}
#: Each periodic job of the fleet and its interval in seconds: one per catch-up policy.
EVERY = {"clock_latest": 1, "clock_none": 2, "clock_all": 1}
#: How long the simulated fleet runs, in seconds of the database's clock.
RUN = 100
#: A skew by the seconds since the run began: the skewed scheduler's error at that moment.
Skew = Callable[[float], float]


def _stepping(since: float) -> float:
    """In step, then 30 s ahead, then 30 s behind, then in step again."""
    return 0.0 if since < 5 else 30.0 if since < 45 else -30.0 if since < 85 else 0.0


SKEWS: dict[str, Skew] = {
    "ahead": lambda since: 30.0,
    "behind": lambda since: -30.0,
    "stepping": _stepping,
}


@pytest.fixture
def catch_up_jobs() -> Iterator[None]:
    with override_settings(ULTJOBS=NO_PRUNE):
        @job(name="clock_latest", every=1)
        def clock_latest() -> None: ...

        @job(name="clock_none", every=2, catch_up="none")
        def clock_none() -> None: ...

        @job(name="clock_all", every=1, catch_up="all")
        def clock_all() -> None: ...
        try:
            yield
        finally:
            for name in EVERY:
                unregister(name)


def _skewed(clock: FakeClock, begun: datetime, skew: Skew) -> Callable[[], datetime]:
    """What a worker whose clock is off by ``skew`` reckons the database's clock to be."""
    return lambda: clock.now + timedelta(seconds=skew((clock.now - begun).total_seconds()))


def _run_fleet(alias: str, clock: FakeClock, schedulers: list[Scheduler], until: datetime
               ) -> None:
    """Step each scheduler when its last step said to, on the database's clock, as its thread
    would; after each step, no cursor may be past the database's clock."""
    wakes = [clock.now] * len(schedulers)
    for _ in range(20_000):  # a scheduler that never sleeps fails here, not by hanging
        first = min(range(len(wakes)), key=wakes.__getitem__)
        if wakes[first] > until:
            return
        clock.now = max(clock.now, wakes[first])
        wakes[first] = clock.now + timedelta(seconds=schedulers[first].step())
        ahead = JobSchedule.objects.using(alias).filter(name__in=EVERY,
                                                       last_tick__gt=clock.now)
        assert not ahead.exists(), (
            f"cursor past the database's clock {clock.now}: "
            f"{list(ahead.values_list('name', 'last_tick'))}")
    raise AssertionError("the schedulers stepped 20,000 times without getting to the end")


def _judge(alias: str, begun: datetime, end: datetime) -> None:
    """Every tick of (begun, end] of each job is one job row, created once the database's clock
    had reached it."""
    for name, every in EVERY.items():
        rows = Job.objects.using(alias).filter(name=name, scheduled_for__gt=begun,
                                               scheduled_for__lte=end)
        counts = dict(rows.values_list("scheduled_for").annotate(n=Count("id")))
        start = begun.replace(microsecond=0) + timedelta(seconds=every - begun.second % every)
        expected = [start + timedelta(seconds=every * i)
                    for i in range(int((end - start).total_seconds()) // every + 1)]
        missing = [t for t in expected if t not in counts]
        doubled = {t: n for t, n in counts.items() if n != 1}
        assert (len(missing), doubled) == (0, {}), (
            f"{name}: {len(missing)} of {len(expected)} ticks never enqueued (the first "
            f"{missing[:3]}), doubled {doubled}")
        early = rows.filter(created_at__lt=F("scheduled_for"))
        assert not early.exists(), f"{name}: {early.count()} ticks enqueued before they came"


@pytest.mark.parametrize("skew", list(SKEWS))
def test_a_worker_whose_clock_is_off_loses_and_doubles_no_tick_of_any_policy(
        alias: str, clock: FakeClock, catch_up_jobs: None, skew: str) -> None:
    # rules 60 (tick-once), 61 (tick-on-time), 62 (catch-up-policy), 102 (database-clock-ticks)
    clock.now = clock.now.replace(second=0, microsecond=0) + timedelta(milliseconds=10)
    begun = clock.now
    store = get_store(alias, clock=clock)
    skewed = Scheduler(store=store, worker_id="skewed",
                       clock=_skewed(clock, begun, SKEWS[skew]))
    steady = Scheduler(store=store, worker_id="steady", clock=clock)
    # The skewed worker is first at every instant both wake at: its statement lands first.
    _run_fleet(alias, clock, [skewed, steady], begun + timedelta(seconds=RUN))
    _judge(alias, begun, begun + timedelta(seconds=RUN - 3))


# rules 61 (tick-on-time), 62 (catch-up-policy), 102 (database-clock-ticks)
def test_a_worker_alone_ahead_enqueues_each_tick_once_when_it_comes(
        alias: str, clock: FakeClock, catch_up_jobs: None) -> None:
    """30 s ahead and alone, it asks early; the database keeps each tick until it comes."""
    clock.now = clock.now.replace(second=0, microsecond=0) + timedelta(milliseconds=10)
    begun = clock.now
    ahead = Scheduler(store=get_store(alias, clock=clock), worker_id="ahead",
                      clock=_skewed(clock, begun, SKEWS["ahead"]))
    _run_fleet(alias, clock, [ahead], begun + timedelta(seconds=40))
    _judge(alias, begun, begun + timedelta(seconds=37))


class _SteppedDatetime(datetime):
    """``datetime`` whose wall clock is 30 s ahead of the host's: an NTP step."""

    @classmethod
    def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
        return datetime.now(tz) + timedelta(seconds=30)


def test_the_estimate_of_the_database_clock_ignores_a_step_of_the_wall_clock(
        alias: str, catch_up_jobs: None) -> None:  # rule 102 (database-clock-ticks)
    """A step of this host's wall clock between two syncs moves nothing the scheduler reckons:
    it counts the time since the database last answered on the monotonic clock."""
    store = get_store(alias)
    scheduler = Scheduler(store=store, worker_id="w1")
    scheduler.step()
    with mock.patch.object(scheduler_module, "datetime", _SteppedDatetime):
        reckoned = scheduler.now()
        truth = store.db_now()
    assert abs((reckoned - truth).total_seconds()) < 2.0, (reckoned, truth)
    assert reckoned.tzinfo is not None and reckoned.utcoffset() == UTC.utcoffset(None)
