"""When a schedule ticks, across DST changes, and what a catch-up keeps (rules 62 (catch-up-policy)
and 64 (bad-schedule-refused)).

Pure: every "now" is given, no clock is read and no SQL is sent.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from django_ultjobs import JobOptionError, job
from django_ultjobs.core.schedules import MAX_CATCH_UP, ON_TIME, Schedule, described
from django_ultjobs.jobs.registry import registered_jobs
from django_ultjobs.testing import unregister

PARIS = ZoneInfo("Europe/Paris")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def ticks(schedule: Schedule, after: datetime, n: int) -> list[datetime]:
    out = []
    for _ in range(n):
        after = schedule.next_tick(after)
        out.append(after)
    return out


# -- DST ------------------------------------------------------------------------------------------


# rule 62 (catch-up-policy)
def test_a_2_30_job_runs_at_3_00_on_the_night_the_clocks_go_forward() -> None:
    """Paris, 30 March 2025: 02:00 becomes 03:00, so 02:30 never happens; the job runs once, at
    03:00 (01:00 UTC), as Debian's cron runs it, then at 02:30 again from the next night."""
    daily = Schedule(cron="30 2 * * *", timezone="Europe/Paris")
    got = ticks(daily, utc(2025, 3, 29, 12), 3)
    assert got == [utc(2025, 3, 30, 1, 0), utc(2025, 3, 31, 0, 30), utc(2025, 4, 1, 0, 30)]
    assert [t.astimezone(PARIS).strftime("%d %H:%M") for t in got] == [
        "30 03:00", "31 02:30", "01 02:30"]


# rule 62 (catch-up-policy)
def test_a_2_30_job_runs_once_on_the_night_the_clocks_go_back() -> None:
    """Paris, 26 October 2025: 03:00 becomes 02:00, so 02:30 happens twice; the job runs at the
    first (00:30 UTC) only."""
    daily = Schedule(cron="30 2 * * *", timezone="Europe/Paris")
    got = ticks(daily, utc(2025, 10, 25, 12), 2)
    assert got == [utc(2025, 10, 26, 0, 30), utc(2025, 10, 27, 1, 30)]


# rule 62 (catch-up-policy)
def test_the_tick_after_one_inside_the_repeated_hour_is_later_not_earlier() -> None:
    """Started from the second 02:00 (01:00 UTC), cron reads the wall clock without telling the
    two apart; the next tick must still come after it, not at the first 02:30 again."""
    daily = Schedule(cron="30 2 * * *", timezone="Europe/Paris")
    assert daily.next_tick(utc(2025, 10, 26, 1, 0)) == utc(2025, 10, 27, 1, 30)
    assert daily.next_tick(utc(2025, 10, 26, 0, 30)) == utc(2025, 10, 27, 1, 30)


# rule 62 (catch-up-policy)
def test_a_half_hourly_job_runs_in_both_copies_of_the_repeated_hour() -> None:
    every_half_hour = Schedule(cron="*/30 * * * *", timezone="Europe/Paris")
    got = ticks(every_half_hour, utc(2025, 10, 25, 23, 0), 6)
    # One every 30 minutes of real time, straight through the change.
    assert got == [utc(2025, 10, 25, 23, 30) + timedelta(minutes=30 * i) for i in range(6)]


def test_an_hourly_job_skips_nothing_and_doubles_nothing_when_clocks_go_forward() -> None:
    hourly = Schedule(cron="0 * * * *", timezone="Europe/Paris")  # rule 62 (catch-up-policy)
    got = ticks(hourly, utc(2025, 3, 29, 23, 30), 4)
    assert got == [utc(2025, 3, 30, 0), utc(2025, 3, 30, 1), utc(2025, 3, 30, 2),
                   utc(2025, 3, 30, 3)]


def test_cron_is_read_in_utc_unless_a_timezone_is_given() -> None:
    assert Schedule(cron="0 3 * * *").next_tick(utc(2025, 7, 1)) == utc(2025, 7, 1, 3)
    assert Schedule(cron="0 3 * * *", timezone="Europe/Paris").next_tick(
        utc(2025, 7, 1)) == utc(2025, 7, 1, 1)


# -- every= ---------------------------------------------------------------------------------------


def test_interval_ticks_are_the_same_instants_for_every_worker() -> None:  # rule 60 (tick-once)
    every = Schedule(every=5)
    assert every.next_tick(utc(2026, 1, 1, 0, 0, 3)) == utc(2026, 1, 1, 0, 0, 5)
    assert every.next_tick(utc(2026, 1, 1, 0, 0, 5)) == utc(2026, 1, 1, 0, 0, 10)
    assert Schedule(every=timedelta(minutes=1).total_seconds()).next_tick(
        utc(2026, 1, 1, 0, 0, 1)) == utc(2026, 1, 1, 0, 1)
    # Whole milliseconds, the finest both engines' clocks compare.
    assert Schedule(every=1.0004).next_tick(utc(2026, 1, 1)).microsecond % 1000 == 0


# -- catch-up -------------------------------------------------------------------------------------


# rule 62 (catch-up-policy)
def test_catch_up_latest_runs_the_most_recent_missed_tick_once() -> None:
    schedule = Schedule(every=60)
    now = utc(2026, 1, 1, 1, 0, 30)
    assert schedule.due(utc(2026, 1, 1, 0, 0), now) == [utc(2026, 1, 1, 1, 0)]


def test_catch_up_none_runs_only_a_tick_on_time() -> None:  # rule 62 (catch-up-policy)
    schedule = Schedule(every=60, catch_up="none")
    assert schedule.due(utc(2026, 1, 1), utc(2026, 1, 1, 1, 0, 30)) == []
    on_time = utc(2026, 1, 1, 1) + ON_TIME
    assert schedule.due(utc(2026, 1, 1, 0, 59, 30), on_time) == [utc(2026, 1, 1, 1)]


def test_catch_up_all_runs_every_missed_tick_up_to_the_bound() -> None:  # rule 62 (catch-up-policy)
    schedule = Schedule(every=60, catch_up="all")
    got = schedule.due(utc(2026, 1, 1), utc(2026, 1, 1, 0, 10, 1))
    assert got == [utc(2026, 1, 1, 0, m) for m in range(1, 11)]
    day = schedule.due(utc(2026, 1, 1), utc(2026, 1, 2))
    assert len(day) == MAX_CATCH_UP and day[-1] == utc(2026, 1, 2)
    hourly = Schedule(cron="0 * * * *", catch_up="all")
    week = hourly.due(utc(2026, 1, 1), utc(2026, 1, 8))
    assert len(week) == MAX_CATCH_UP and week[-1] == utc(2026, 1, 8)


# rule 62 (catch-up-policy)
def test_a_catch_up_across_the_repeated_hour_counts_real_time() -> None:
    """Missed ticks of a half-hourly Paris job over the night the clocks go back, seen from
    inside the repeated hour: each 30 minutes of real time once, none hidden by the fold."""
    half_hourly = Schedule(cron="*/30 * * * *", timezone="Europe/Paris", catch_up="all")
    got = half_hourly.due(utc(2025, 10, 25, 22, 45), utc(2025, 10, 26, 1, 10))
    assert got == [utc(2025, 10, 25, 23) + timedelta(minutes=30 * i) for i in range(5)]
    latest = Schedule(cron="*/30 * * * *", timezone="Europe/Paris")
    assert latest.due(utc(2025, 10, 25, 22, 45), utc(2025, 10, 26, 1, 10)) == [
        utc(2025, 10, 26, 1, 0)]


def test_the_latest_tick_after_a_year_down_is_found_without_walking_the_year() -> None:
    minutely = Schedule(cron="* * * * *")
    now = utc(2026, 1, 1, 12, 0, 30)
    assert minutely.due(utc(2025, 1, 1), now) == [utc(2026, 1, 1, 12, 0)]
    every_second = Schedule(every=1, catch_up="all")
    assert len(every_second.due(utc(2025, 1, 1), now)) == MAX_CATCH_UP


def test_nothing_is_due_before_the_next_tick() -> None:
    for catch_up in ("latest", "none", "all"):
        schedule = Schedule(every=60, catch_up=catch_up)
        assert schedule.due(utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 0, 0, 59)) == []


# -- refused at declaration -----------------------------------------------------------------------


@pytest.mark.parametrize(("options", "says"), [
    ({"cron": "61 * * * *"}, "cron '61 * * * *' is refused: Bad minute"),
    ({"cron": "* * *"}, "Wrong number of fields"),
    ({"cron": "0 0 30 2 *"}, "Bad day-of-month"),
    ({"cron": ""}, "cron must be a cron expression"),
    ({"cron": 5}, "cron must be a cron expression"),
    ({"cron": "0 " + ",".join(["1"] * 150) + " * * *"}, "at most 200 characters"),
    ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "timezone 'Mars/Olympus' is no IANA"),
    ({"cron": "* * * * *", "timezone": "../etc/passwd"}, "is no IANA"),
    ({"every": 0}, "every must be from 1 second"),
    ({"every": -5}, "every must be from 1 second"),
    ({"every": float("nan")}, "every must be from 1 second"),
    ({"every": float("inf")}, "every must be from 1 second"),
    ({"every": "5"}, "every must be a number of seconds"),
    ({"every": True}, "every must be a number of seconds"),
    ({"every": 5, "timezone": "UTC"}, "timezone= applies to cron= only"),
    ({"every": 5, "cron": "* * * * *"}, "cron= or every=, not both"),
    ({"every": 5, "catch_up": "some"}, "catch_up must be one of"),
    ({"timezone": "UTC"}, "apply to a periodic job"),
    ({"catch_up": "all"}, "apply to a periodic job"),
])
# rule 64 (bad-schedule-refused)
def test_a_bad_schedule_is_refused_at_declaration(options: dict, says: str) -> None:
    with pytest.raises(JobOptionError) as refused:
        @job(name="bad_schedule", **options)
        def bad_schedule() -> None: ...
    assert str(refused.value).startswith("job 'bad_schedule': ") and says in str(refused.value)
    unregister("bad_schedule")


@pytest.mark.parametrize(("every", "text"), [
    (123456.7, "every 123456.7 s"), (1.5, "every 1.5 s"),
    (1.1 + 2.2, "every 3.3000000000000003 s"),
    (31_622_399.999, "every 31622399.999 s"), (30, "every 30 s"), (60.0, "every 60 s"),
    (2**20, "every 1048576 s"), (31_622_400, "every 31622400 s"),
])
def test_every_is_described_as_given_and_read_back_the_same(every: float, text: str) -> None:
    """rule 64 (bad-schedule-refused): the schedule's row shows ``every`` exactly, and the admin
    reads that same value back from it: ``{:g}`` kept six digits (123456.7 was stored as "every
    123457 s")."""
    assert Schedule(every=every).describe() == text
    back = described(text)
    assert back is not None and back.every == every and back.describe() == text


# rule 64 (bad-schedule-refused)
def test_a_periodic_job_whose_parameters_lack_defaults_is_refused() -> None:
    with pytest.raises(JobOptionError, match=r"every parameter needs a default.*order_id"):
        @job(name="needs_args", every=60)
        def needs_args(order_id: int, note: str = "") -> None: ...
    with pytest.raises(JobOptionError, match="order_id"):
        @job(name="needs_args", cron="0 * * * *", takes_context=True)
        def needs_args_ctx(ctx: object, order_id: int) -> None: ...
    assert "needs_args" not in registered_jobs()


def test_a_periodic_job_with_defaults_context_or_varargs_is_accepted() -> None:
    try:
        @job(name="fine_defaults", every=60)
        def fine_defaults(days: int = 7, *rest: int, **more: int) -> None: ...

        @job(name="fine_context", cron="*/5 * * * *", timezone="Europe/Paris",
             takes_context=True, catch_up="all")
        def fine_context(ctx: object) -> None: ...

        assert fine_defaults.schedule == Schedule(every=60)
        assert fine_context.schedule.describe() == "*/5 * * * *"
        # A periodic job may still be enqueued by code, with arguments.
        assert fine_defaults.call(3).args == (3,)
    finally:
        unregister("fine_defaults")
        unregister("fine_context")


# -- system checks --------------------------------------------------------------------------------


def _check_ids() -> list[str]:
    from django_ultjobs.checks import check_schedules

    return [m.id for m in check_schedules()]


# rule 64 (bad-schedule-refused)
def test_a_bad_prune_schedule_is_reported_by_e040(settings) -> None:
    settings.ULTJOBS = {**settings.ULTJOBS, "PRUNE_SCHEDULE": "0 25 * * *"}
    assert _check_ids() == ["django_ultjobs.E040"]
    settings.ULTJOBS = {**settings.ULTJOBS, "PRUNE_SCHEDULE": "0 3 * * *",
                        "PRUNE_TIMEZONE": "Nowhere/Else"}
    assert _check_ids() == ["django_ultjobs.E040"]
    settings.ULTJOBS = {**settings.ULTJOBS, "PRUNE_SCHEDULE": None}
    assert _check_ids() == []


def test_a_cron_without_timezone_on_a_local_site_is_warned_by_w040(settings) -> None:
    settings.TIME_ZONE = "Europe/Paris"
    try:
        @job(name="local_hours", cron="0 9 * * *")
        def local_hours() -> None: ...

        @job(name="said_utc", cron="0 9 * * *", timezone="UTC")
        def said_utc() -> None: ...
        assert _check_ids() == ["django_ultjobs.W040"]
        settings.TIME_ZONE = "UTC"
        assert _check_ids() == []
    finally:
        unregister("local_hours")
        unregister("said_utc")


@pytest.mark.parametrize("zone", ["localtime", "right/UTC", "posix/Europe/Paris", "Factory", ""])
def test_a_prune_timezone_that_is_no_iana_name_is_reported_by_e040(settings, zone: str) -> None:
    # rule 64 (bad-schedule-refused): the setting is refused as @job(timezone=...) is, the check
    # saying why.
    from django_ultjobs.checks import check_schedules

    settings.ULTJOBS = {**settings.ULTJOBS, "PRUNE_TIMEZONE": zone}
    (message,) = check_schedules()
    assert message.id == "django_ultjobs.E040"
    assert "IANA" in message.msg and "not 'localtime'" in message.hint


def test_w040_suggests_no_zone_a_job_would_refuse(settings) -> None:
    # rule 64 (bad-schedule-refused): Django takes TIME_ZONE = "posix/Europe/Paris"; a job does not.
    from django_ultjobs.checks import check_schedules

    try:
        @job(name="local_hours", cron="0 9 * * *")
        def local_hours() -> None: ...

        settings.TIME_ZONE = "posix/Europe/Paris"
        (message,) = check_schedules()
        assert message.id == "django_ultjobs.W040"
        assert message.hint.startswith("Pass @job(..., timezone= and the IANA name of the zone "
                                       "TIME_ZONE 'posix/Europe/Paris' stands for)")
        settings.TIME_ZONE = "Europe/Paris"
        (message,) = check_schedules()
        assert message.hint.startswith("Pass @job(..., timezone='Europe/Paris')")
    finally:
        unregister("local_hours")
