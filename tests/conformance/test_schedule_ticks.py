"""Enqueueing a periodic job's ticks, on both engines: once per tick across the fleet.

The store side of rules 60 (tick-once) to 62 (catch-up-policy) and 102 (database-clock-ticks):
``ScheduleStore.enqueue_ticks`` takes the candidate ticks a worker offers and, on the database's
clock, enqueues those that have come and that the catch-up policy keeps (exactly what
``Schedule.due`` says for that clock), one job each, visible at its tick; it moves the schedule's
cursor forward only and never past the database's clock, does nothing for a paused schedule or an
offer that does not reach the clock, and leaves a tick already in the table alone (the unique index
on (name, tick)), however many threads send the same tick at once.
"""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, connections, transaction

from django_ultjobs.core.schedules import MAX_CATCH_UP, Candidates, Schedule
from django_ultjobs.models import Job, JobSchedule
from django_ultjobs.store import JobStore, get_store
from django_ultjobs.store.schedules import ScheduleInfo, ScheduleStore, TickAnswer, TickJob
from tests.doubles import FakeClock

from .helpers import claim

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

TICK_JOB = TickJob(name="tick", queue="default", priority=0, max_attempts=3)
INFO = ScheduleInfo(name="tick", schedule="every 1 s", timezone="", catch_up="latest")


def _whole_second(clock: FakeClock, ahead: float = 0.0) -> datetime:
    return clock.now.replace(microsecond=0) + timedelta(seconds=ahead)


def _ticks(alias: str) -> list[datetime]:
    return list(Job.objects.using(alias).filter(name="tick").order_by("scheduled_for")
                .values_list("scheduled_for", flat=True))


def _cursor(alias: str) -> datetime:
    return JobSchedule.objects.using(alias).get(name="tick").last_tick


def _send(schedules: ScheduleStore, ticks: list[datetime], by: str, *,
          horizon: datetime | None = None, floor: datetime | None = None,
          keep: int = MAX_CATCH_UP, late: float | None = None) -> TickAnswer:
    """Offer ``ticks`` as every tick up to ``horizon`` (5 s past the last unless given)."""
    offer = Candidates(ticks=tuple(ticks), floor=floor,
                       horizon=horizon or ticks[-1] + timedelta(seconds=5), keep=keep, late=late)
    return schedules.enqueue_ticks(TICK_JOB, offer, by)


def _offer(schedules: ScheduleStore, ticks: list[datetime], by: str, **options: object
           ) -> list[datetime]:
    """The ticks of ``ticks`` the statement enqueued (the options as ``_send``'s)."""
    return [t for _, t in _send(schedules, ticks, by, **options).created]  # type: ignore[arg-type]


def _begin_at(alias: str, cursor: datetime) -> None:
    """Move the cursor back, as if the schedule began at ``cursor`` (the ticks after it due)."""
    JobSchedule.objects.using(alias).filter(name="tick").update(last_tick=cursor)


def test_sync_registers_a_schedule_begun_now_and_returns_the_database_clock(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:  # rule 62 (catch-up-policy)
    states, now = ScheduleStore(cstore).sync([INFO])
    assert now == clock.now
    assert states["tick"].last_tick == clock.now and not states["tick"].paused
    row = JobSchedule.objects.using(alias).get(name="tick")
    assert (row.schedule, row.catch_up) == ("every 1 s", "latest")
    # A second sync (another worker, a newer deploy) describes it again, keeps the cursor.
    clock.advance(5)
    states, _ = ScheduleStore(cstore).sync([ScheduleInfo("tick", "every 2 s", "", "all")])
    assert states["tick"].last_tick == now
    assert JobSchedule.objects.using(alias).get(name="tick").schedule == "every 2 s"


# rules 60 (tick-once), 61 (tick-on-time), 102 (database-clock-ticks)
def test_a_tick_is_one_job_visible_at_its_tick(cstore: JobStore, clock: FakeClock,
                                                alias: str) -> None:
    schedules = ScheduleStore(cstore)
    schedules.sync([INFO])
    tick = _whole_second(clock, 2)
    # Offered before it comes (a worker whose clock runs ahead): not enqueued yet.
    assert _offer(schedules, [tick], "schedule:w1", keep=1) == []
    clock.now = tick
    answer = _send(schedules, [tick], "schedule:w1", keep=1)
    assert [t for _, t in answer.created] == [tick]
    assert (answer.now, answer.cursor, answer.paused) == (tick, tick, False)
    job = Job.objects.using(alias).get(id=answer.created[0][0])
    assert (job.scheduled_for, job.visible_at, job.args, job.kwargs) == (tick, tick, [], {})
    assert job.enqueued_by == "schedule:w1"
    assert [j.id for j in claim(cstore)] == [job.id]
    # The same tick sent again (a second worker): nothing new.
    assert _offer(schedules, [tick], "schedule:w2", keep=1) == []
    assert _ticks(alias) == [tick]


def test_the_cursor_only_moves_forward(cstore: JobStore, clock: FakeClock,
                                       alias: str) -> None:  # rule 60 (tick-once)
    schedules = ScheduleStore(cstore)
    schedules.sync([INFO])
    t1, t2, t3, t4 = (_whole_second(clock, i) for i in (1, 2, 3, 4))
    clock.now = t4 + timedelta(milliseconds=10)
    assert _offer(schedules, [t2], "w1")
    # A slower worker's older tick, sent after a newer one landed: refused by the cursor.
    assert _offer(schedules, [t1], "w2") == []
    # A catch-up of several ticks, some of them in already: only the new ones are created.
    assert _offer(schedules, [t2, t3, t4], "w1") == [t3, t4]
    assert _ticks(alias) == [t2, t3, t4]
    assert _cursor(alias) == t4


def test_a_paused_schedule_enqueues_nothing(cstore: JobStore, clock: FakeClock,
                                            alias: str) -> None:  # rule 63 (fleet-wide-pause)
    schedules = ScheduleStore(cstore)
    schedules.sync([INFO])
    JobSchedule.objects.using(alias).filter(name="tick").update(paused=True)
    tick = _whole_second(clock, 1)
    clock.now = tick
    answer = _send(schedules, [tick], "w1")
    assert (answer.created, answer.paused) == ([], True)
    assert _ticks(alias) == []


# rule 60 (tick-once)
def test_the_unique_index_refuses_a_second_row_for_a_tick(alias: str) -> None:
    tick = datetime(2030, 1, 1, tzinfo=UTC)
    Job.objects.using(alias).create(name="tick", scheduled_for=tick)
    with pytest.raises(IntegrityError), transaction.atomic(using=alias):
        Job.objects.using(alias).create(name="tick", scheduled_for=tick)
    # Jobs enqueued by code carry no tick, and any number of them may exist.
    Job.objects.using(alias).create(name="tick")
    Job.objects.using(alias).create(name="tick")
    assert Job.objects.using(alias).filter(name="tick").count() == 3


# rule 60 (tick-once)
def test_concurrent_sends_of_the_same_ticks_create_each_once(alias: str) -> None:
    """16 threads, each its own connection, send the same 20 ticks one by one at once."""
    store = get_store(alias)
    ScheduleStore(store).sync([INFO])
    start = store.db_now().replace(microsecond=0) - timedelta(seconds=30)
    ticks = [start + timedelta(seconds=i) for i in range(20)]
    _begin_at(alias, start - timedelta(seconds=1))
    barrier = threading.Barrier(16)
    created: list[datetime] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def send() -> None:
        try:
            schedules = ScheduleStore(get_store(alias))
            barrier.wait()
            for tick in ticks:
                mine = _offer(schedules, [tick], "w", horizon=ticks[-1] + timedelta(minutes=5))
                with lock:
                    created.extend(mine)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(created) == ticks
    assert _ticks(alias) == ticks


# rule 60 (tick-once)
def test_concurrent_catch_ups_overlapping_create_each_tick_once(alias: str) -> None:
    """Threads sending overlapping catch-up batches: the unique index skips the overlap."""
    store = get_store(alias)
    ScheduleStore(store).sync([INFO])
    start = store.db_now().replace(microsecond=0) - timedelta(seconds=40)
    ticks = [start + timedelta(seconds=i) for i in range(30)]
    _begin_at(alias, start - timedelta(seconds=1))
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def send(offset: int) -> None:
        try:
            schedules = ScheduleStore(get_store(alias))
            barrier.wait()
            for end in range(offset + 5, 31, 5):
                _offer(schedules, ticks[max(0, end - 10):end], "w",
                       horizon=ticks[-1] + timedelta(minutes=5))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=(i % 5,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    got = _ticks(alias)
    assert len(got) == len(set(got))
    assert set(got) <= set(ticks)


# rules 60 (tick-once), 61 (tick-on-time), 102 (database-clock-ticks)
def test_ticks_still_ahead_of_the_database_clock_are_neither_enqueued_nor_passed(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:
    """A worker whose clock runs 30 s ahead offers the next 30 ticks: none has come on the
    database's clock, so none is enqueued and the cursor stays where it was."""
    schedules = ScheduleStore(cstore)
    begun = schedules.sync([INFO])[0]["tick"].last_tick
    ahead = [_whole_second(clock, i) for i in range(1, 31)]
    for keep in (1, MAX_CATCH_UP):
        assert _offer(schedules, ahead, "ahead", keep=keep) == []
        assert _cursor(alias) == begun
    assert _ticks(alias) == []
    # Ten seconds on, the same offer: the newest tick that has come, and the cursor at it.
    clock.now = _whole_second(clock, 10) + timedelta(milliseconds=10)
    assert _offer(schedules, ahead, "ahead", keep=1) == [ahead[9]]
    assert _cursor(alias) == ahead[9]
    # The worker whose clock is right sends the next tick when it comes: it is still free.
    clock.now = ahead[10] + timedelta(milliseconds=10)
    assert _offer(schedules, ahead[10:11], "steady", keep=1) == [ahead[10]]


#: (cursor, database clock) in seconds from a whole minute, for a job ticking every 10 s: a tick
#: due now, one 6 s late (too late for catch_up="none"), several missed, a day missed (the offer
#: cut short of the cursor), none due yet.
SITUATIONS = [(-5.0, 0.01), (-15.0, 6.0), (-35.0, 2.0), (-86_400.0, 0.3), (-5.0, -2.0)]
#: How far the offering worker's estimate of the database's clock is off, within the margin:
#: 4 s behind, it reckons the tick 6 s late to be 2 s late, on time.
ERRORS = [-4.0, 0.0, 4.0]


@pytest.mark.parametrize("catch_up", ["latest", "none", "all"])
def test_the_statement_keeps_what_the_policy_keeps_on_the_database_clock(
        cstore: JobStore, clock: FakeClock, alias: str, catch_up: str) -> None:
    # rules 62 (catch-up-policy), 102 (database-clock-ticks)
    """Whatever a worker reckons the time to be (within the margin), the statement enqueues
    exactly the ticks ``Schedule.due`` keeps at the database's clock, and moves the cursor to
    the newest tick that clock has reached, kept or skipped."""
    schedules = ScheduleStore(cstore)
    schedules.sync([INFO])
    schedule = Schedule(every=10, catch_up=catch_up)
    minute = clock.now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    for (cursor_at, now_at), error in itertools.product(SITUATIONS, ERRORS):
        Job.objects.using(alias).filter(name="tick").delete()
        cursor = minute + timedelta(seconds=cursor_at)
        _begin_at(alias, cursor)
        clock.now = minute + timedelta(seconds=now_at)
        offer = schedule.candidates(cursor, clock.now + timedelta(seconds=error))
        answer = schedules.enqueue_ticks(TICK_JOB, offer, "w")
        case = f"cursor {cursor_at:+} s, clock {now_at:+} s, estimate off by {error:+} s"
        kept = schedule.due(cursor, clock.now)
        assert [t for _, t in answer.created] == kept, case
        assert _ticks(alias) == kept, case
        reached = Schedule(every=10).due(cursor, clock.now)
        assert _cursor(alias) == answer.cursor == (reached[-1] if reached else cursor), case
        assert answer.now == clock.now, case


def test_an_offer_that_does_not_reach_the_database_clock_changes_nothing(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:  # rule 102 (database-clock-ticks)
    """An estimate far behind the database's clock offers ticks that stop short of it, and one
    far ahead cuts a long catch-up short of ticks the policy would keep: the statement keeps
    none (it cannot tell which are the newest) and answers with its clock, to offer again."""
    schedules = ScheduleStore(cstore)
    schedules.sync([INFO])
    latest = Schedule(every=1)
    cursor = clock.now.replace(microsecond=0) - timedelta(seconds=60)
    _begin_at(alias, cursor)
    behind = latest.candidates(cursor, clock.now - timedelta(seconds=30))
    answer = schedules.enqueue_ticks(TICK_JOB, behind, "behind")
    assert (answer.created, answer.cursor, answer.now) == ([], cursor, clock.now)
    everything = Schedule(every=1, catch_up="all")
    ahead = everything.candidates(cursor - timedelta(days=1), clock.now + timedelta(seconds=30))
    _begin_at(alias, cursor - timedelta(days=1))
    answer = schedules.enqueue_ticks(TICK_JOB, ahead, "ahead")
    assert (answer.created, answer.cursor) == ([], cursor - timedelta(days=1))
    # Offered again around the clock it answered with: the policy's ticks, each once.
    again = everything.candidates(answer.cursor, answer.now)
    answer = schedules.enqueue_ticks(TICK_JOB, again, "ahead")
    assert len(answer.created) == MAX_CATCH_UP
    assert answer.created[-1][1] == clock.now.replace(microsecond=0)
    assert _ticks(alias) == [t for _, t in answer.created]
