"""What a periodic job's tick costs each worker (rules 60 (tick-once) and 61 (tick-on-time)), on
PostgreSQL and SQLite.

    .venv/bin/python -m benchmarks.scheduling [--repeat 300] [--jobs 100000]

Creates a throwaway PostgreSQL database (``ultjobs_sched_bench``, or $BENCH_PG_NAME) and an
SQLite file, migrates both, fills the job table with ``--jobs`` finished ticks of the schedule
(a year of an every=5 s job's history is about 6 million; the statement reads none of them) and
times, median of ``--repeat``: one round trip (for scale), the tick statement of the worker that
gets there first (it creates the job) and of one that comes second (the tick is in: nothing
changes), and the schedules' sync. It counts the statements each sends through Django's cursor
(rule 41 (instrumented-statements)). The claim is not touched: ticks are sent by the scheduler
thread. The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

DB_NAME = os.environ.get("BENCH_PG_NAME", "ultjobs_sched_bench")
os.environ["BENCH_PG_NAME"] = DB_NAME
os.environ.setdefault("BENCH_TMP", tempfile.mkdtemp(prefix="ultjobs-sched-"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")


def _admin() -> psycopg.Connection:
    return psycopg.connect(host=os.environ.get("ULTJOBS_PG_HOST", "127.0.0.1"),
                           user=os.environ.get("ULTJOBS_PG_USER", "postgres"),
                           port=os.environ.get("ULTJOBS_PG_PORT", "5432"),
                           dbname="postgres", autocommit=True)


def _median_ms(fn: Callable[[], object], repeat: int) -> str:
    """The median and the fastest of ``repeat`` calls, in ms: on a shared machine the fastest
    shows what the statement costs, the median what the machine's load adds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return f"{statistics.median(times):.3f} ms (fastest {min(times):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    with _admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')
        admin.execute(f'CREATE DATABASE "{DB_NAME}"')
    try:
        import django
        django.setup()
        from django.core.management import call_command
        for alias in ("postgres", "sqlite"):
            call_command("migrate", database=alias, verbosity=0)
            _measure(alias, args.repeat, args.jobs)
    finally:
        from django.db import connections
        connections.close_all()
        with _admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')
        Path(os.environ["BENCH_TMP"], "ultjobs-bench.sqlite3").unlink(missing_ok=True)


def _fill(alias: str, jobs: int, before: datetime) -> None:
    from django_ultjobs.models import Job
    rows = [Job(name="bench_tick", status="succeeded", scheduled_for=before - timedelta(
        seconds=5 * i), finished_at=before) for i in range(1, jobs + 1)]
    Job.objects.using(alias).bulk_create(rows, batch_size=5000)


def _measure(alias: str, repeat: int, jobs: int) -> None:
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    from django_ultjobs.core.schedules import Candidates
    from django_ultjobs.models import JobSchedule
    from django_ultjobs.store import get_store
    from django_ultjobs.store.schedules import ScheduleInfo, ScheduleStore, TickJob

    store = get_store(alias)
    schedules = ScheduleStore(store)
    info = [ScheduleInfo("bench_tick", "every 5 s", "", "latest")]
    schedules.sync(info)
    # The ticks sent are in the past (a tick is enqueued only once it has come,
    # rule 102 (database-clock-ticks)): the schedule begins before them, and the history filled in
    # goes before that.
    now = store.db_now()
    begun = now.replace(microsecond=0) - timedelta(seconds=5 * 10 * repeat)
    JobSchedule.objects.using(alias).filter(name="bench_tick").update(last_tick=begun)
    _fill(alias, jobs, begun)
    if alias == "postgres":
        with connections[alias].cursor() as cur:
            cur.execute("VACUUM ANALYZE django_ultjobs_job")
    job = TickJob("bench_tick", "default", 0, 3)
    ticks = iter(begun + timedelta(seconds=5 * i) for i in range(1, 10 * repeat))
    sent: list[datetime] = []

    def offer(tick: datetime) -> Candidates:
        """The newest tick, offered as every tick up to a horizon past the whole run."""
        return Candidates(ticks=(tick,), floor=None, horizon=now + timedelta(days=1), keep=1,
                          late=None)

    def first() -> None:
        tick = next(ticks)
        sent.append(tick)
        assert schedules.enqueue_ticks(job, offer(tick), "bench:first").created

    def second() -> None:
        assert not schedules.enqueue_ticks(job, offer(sent[-1]), "bench:second").created

    with connections[alias].cursor() as cur:
        round_trip = _median_ms(lambda: cur.execute("SELECT 1"), repeat)
    won = _median_ms(first, repeat)
    lost = _median_ms(second, repeat)
    synced = _median_ms(lambda: schedules.sync(info), repeat)
    connection = connections[alias]
    with CaptureQueriesContext(connection) as first_q:
        first()
    with CaptureQueriesContext(connection) as second_q:
        second()
    print(f"{alias:8} round trip {round_trip} | tick, first worker {won} "
          f"({len(first_q)} statements) | tick, any other worker {lost} "
          f"({len(second_q)} statements) | sync {synced} | {jobs:,} ticks in the table "
          f"at {datetime.now(UTC):%Y-%m-%d}")


if __name__ == "__main__":
    main()
