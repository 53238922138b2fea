"""The async lane: async def jobs that each wait, drained by ONE worker process on PostgreSQL.

    BENCH_PG_NAME=ultjobs_bench_me python -m benchmarks.async_lane [--jobs 10000] [--sleep 0.05]
        [--concurrency 500,1000] [--old-threads 64] [--noop-jobs 20000]

For each ``--async-concurrency`` C: jobs/s from first claim to last settle (the database's
timestamps, so process start-up is not counted) against the ideal C / sleep. Measured in the same
run: the design before the lane (a loop per run, ``asyncio.run`` on an executor thread, at most
``--threads`` at once) at ``--old-threads``; and what a registered async kind costs a drain of
sync no-op jobs (every claim split by lane).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--sleep", type=float, default=0.05)
    parser.add_argument("--concurrency", default="500,1000")
    parser.add_argument("--old-threads", type=int, default=64)
    parser.add_argument("--noop-jobs", type=int, default=20_000)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(*args.child)
    print(f"{args.jobs:,} jobs each awaiting asyncio.sleep({args.sleep:g}), one worker process, "
          "PostgreSQL")
    print("design | at once | jobs/s | ideal jobs/s | of ideal | worker CPU per job")
    print("--- | --: | --: | --: | --: | --:")
    for concurrency in [int(c) for c in args.concurrency.split(",")]:
        rate, cpu = _measure("lane", args.jobs, args.sleep, concurrency)
        _row("async lane (--async-concurrency)", concurrency, rate, cpu, args.sleep)
    rate, cpu = _measure("old", args.jobs, args.sleep, args.old_threads)
    _row("asyncio.run per run on a thread (--threads)", args.old_threads, rate, cpu, args.sleep)
    plain, _ = _measure("noop", args.noop_jobs, 0.0, 8, async_kinds=False)
    split, _ = _measure("noop", args.noop_jobs, 0.0, 8, async_kinds=True)
    print(f"\n{args.noop_jobs:,} sync no-op jobs, --threads 8: {plain:,.0f} jobs/s with no async "
          f"kind registered, {split:,.0f} jobs/s with one (claims split by lane): "
          f"{split / plain:.2f}x")
    return 0


def _row(design: str, at_once: int, rate: float, cpu: float, sleep: float) -> None:
    ideal = at_once / sleep
    print(f"{design} | {at_once:,} | {rate:,.0f} | {ideal:,.0f} | {rate / ideal:.0%} | "
          f"{cpu * 1e6:,.0f} µs")


def _measure(mode: str, jobs: int, sleep: float, places: int, *, async_kinds: bool = True
             ) -> tuple[float, float]:
    """(jobs/s, the worker process's CPU seconds per job)."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="benchmarks.settings", BENCH_ALIAS="postgres",
               PYTHONPATH=str(REPO))
    if async_kinds:
        env["BENCH_ASYNC_JOBS"] = "1"
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.async_lane", "--child", mode, str(jobs), str(sleep),
         str(places)], env=env, cwd=REPO, check=True, capture_output=True, text=True)
    sys.stderr.write(out.stderr)
    rate, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(rate), float(cpu)


def _child(mode: str, jobs: str, sleep: str, places: str) -> int:
    """Reset the database, queue the jobs, drain them with one burst worker; print jobs/s."""
    import django

    django.setup()
    from django.db import transaction

    from benchmarks import jobs as bench_jobs

    alias = "postgres"
    _reset_database(alias)
    count, seconds = int(jobs), float(sleep)
    func = {"lane": getattr(bench_jobs, "async_sleep", None),
            "old": getattr(bench_jobs, "thread_loop_sleep", None), "noop": bench_jobs.noop}[mode]
    calls = [()] * count if mode == "noop" else [(seconds,)] * count
    with transaction.atomic(using=alias):
        for start in range(0, count, 5_000):
            func.bulk_enqueue(calls[start:start + 5_000])
    flags = (["--async-concurrency", places, "--threads", "4"] if mode == "lane"
             else ["--threads", places])
    print(*_drain(alias, flags))
    return 0


def _reset_database(alias: str) -> None:
    """Start from an empty database, as ``benchmarks.throughput`` does."""
    import psycopg
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    conf = settings.DATABASES[alias]
    connections[alias].close()
    with psycopg.connect(host=conf["HOST"], port=conf["PORT"], user=conf["USER"],
                         dbname="postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{conf["NAME"]}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{conf["NAME"]}"')
    call_command("migrate", database=alias, verbosity=0)


def _drain(alias: str, flags: list[str]) -> tuple[float, float]:
    """Drain with one burst worker; (jobs/s, its CPU seconds per job)."""
    import resource

    from django.db.models import Max, Min

    from django_ultjobs.models import Job

    queued = Job.objects.using(alias).filter(status="queued").count()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    worker = subprocess.run(
        [sys.executable, "-m", "django", "runjobworker", "--database", alias, "--burst",
         "--visibility-timeout", "60", "--heartbeat-interval", "10", *flags],
        env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, check=False)
    if worker.returncode != 0:
        raise SystemExit(f"the worker exited {worker.returncode}")
    done = Job.objects.using(alias).filter(status="succeeded")
    if done.count() != queued:
        raise SystemExit(f"the drain left {queued - done.count()} jobs unfinished")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    span = done.aggregate(start=Min("claimed_at"), end=Max("finished_at"))
    return queued / (span["end"] - span["start"]).total_seconds(), cpu / queued


if __name__ == "__main__":
    sys.exit(main())
