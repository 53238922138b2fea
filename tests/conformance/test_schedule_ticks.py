"""Enqueueing a periodic job's ticks, on both engines: once per tick across the fleet.

The store side of rules 60 and 61: ``ScheduleStore.enqueue_ticks`` creates one job per tick,
visible at its tick, moves the schedule's cursor forward only, does nothing for a paused
schedule, and leaves a tick already in the table alone (the unique index on (name, tick)),
however many threads send the same tick at once.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, connections, transaction

from django_ultjobs.models import Job, JobSchedule
from django_ultjobs.store import JobStore, get_store
from django_ultjobs.store.schedules import ScheduleInfo, ScheduleStore, TickJob
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


def test_sync_registers_a_schedule_begun_now_and_returns_the_database_clock(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:  # rule 62
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


def test_a_tick_is_one_job_visible_at_its_tick(cstore: JobStore, clock: FakeClock,
                                                alias: str) -> None:  # rules 60, 61
    schedules = ScheduleStore(cstore)
    schedules.sync([INFO])
    tick = _whole_second(clock, 2)
    created = schedules.enqueue_ticks(TICK_JOB, [tick], "schedule:w1")
    assert [t for _, t in created] == [tick]
    job = Job.objects.using(alias).get(id=created[0][0])
    assert (job.scheduled_for, job.visible_at, job.args, job.kwargs) == (tick, tick, [], {})
    assert job.enqueued_by == "schedule:w1"
    assert not claim(cstore), "claimed before its tick"
    clock.now = tick
    assert [j.id for j in claim(cstore)] == [job.id]
    # The same tick sent again (a second worker): nothing new.
    assert schedules.enqueue_ticks(TICK_JOB, [tick], "schedule:w2") == []
    assert _ticks(alias) == [tick]


def test_the_cursor_only_moves_forward(cstore: JobStore, clock: FakeClock,
                                       alias: str) -> None:  # rule 60
    schedules = ScheduleStore(cstore)
    schedules.sync([INFO])
    t1, t2 = _whole_second(clock, 1), _whole_second(clock, 2)
    assert schedules.enqueue_ticks(TICK_JOB, [t2], "w1")
    # A slower worker's older tick, sent after a newer one landed: refused by the cursor.
    assert schedules.enqueue_ticks(TICK_JOB, [t1], "w2") == []
    # A catch-up of several ticks, some of them in already: only the new ones are created.
    t3, t4 = _whole_second(clock, 3), _whole_second(clock, 4)
    created = schedules.enqueue_ticks(TICK_JOB, [t2, t3, t4], "w1")
    assert [t for _, t in created] == [t3, t4]
    assert _ticks(alias) == [t2, t3, t4]
    assert JobSchedule.objects.using(alias).get(name="tick").last_tick == t4


def test_a_paused_schedule_enqueues_nothing(cstore: JobStore, clock: FakeClock,
                                            alias: str) -> None:  # rule 63
    schedules = ScheduleStore(cstore)
    schedules.sync([INFO])
    JobSchedule.objects.using(alias).filter(name="tick").update(paused=True)
    assert schedules.enqueue_ticks(TICK_JOB, [_whole_second(clock, 1)], "w1") == []
    assert _ticks(alias) == []


def test_the_unique_index_refuses_a_second_row_for_a_tick(alias: str) -> None:  # rule 60
    tick = datetime(2030, 1, 1, tzinfo=UTC)
    Job.objects.using(alias).create(name="tick", scheduled_for=tick)
    with pytest.raises(IntegrityError), transaction.atomic(using=alias):
        Job.objects.using(alias).create(name="tick", scheduled_for=tick)
    # Jobs enqueued by code carry no tick, and any number of them may exist.
    Job.objects.using(alias).create(name="tick")
    Job.objects.using(alias).create(name="tick")
    assert Job.objects.using(alias).filter(name="tick").count() == 3


def test_concurrent_sends_of_the_same_ticks_create_each_once(alias: str) -> None:  # rule 60
    """16 threads, each its own connection, send the same 20 ticks one by one at once."""
    ScheduleStore(get_store(alias)).sync([INFO])
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    ticks = [start + timedelta(seconds=i) for i in range(20)]
    barrier = threading.Barrier(16)
    created: list[datetime] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def send() -> None:
        try:
            schedules = ScheduleStore(get_store(alias))
            barrier.wait()
            for tick in ticks:
                mine = schedules.enqueue_ticks(TICK_JOB, [tick], "w")
                with lock:
                    created.extend(t for _, t in mine)
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


def test_concurrent_catch_ups_overlapping_create_each_tick_once(alias: str) -> None:  # rule 60
    """Threads sending overlapping catch-up batches: the unique index skips the overlap."""
    ScheduleStore(get_store(alias)).sync([INFO])
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    ticks = [start + timedelta(seconds=i) for i in range(30)]
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def send(offset: int) -> None:
        try:
            schedules = ScheduleStore(get_store(alias))
            barrier.wait()
            for end in range(offset + 5, 31, 5):
                schedules.enqueue_ticks(TICK_JOB, ticks[max(0, end - 10):end], "w")
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
