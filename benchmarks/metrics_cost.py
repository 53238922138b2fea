"""What metrics and run hooks cost the drain: the same drain with no SDK, with one, and with an
SDK plus a receiver of each run hook.

    python -m benchmarks.metrics_cost [--jobs 20000] [--threads 16] [--repeat 3]
                                      [--engine postgres]

Each round drains the same number of no-op jobs with one ``runjobworker --burst`` process per
mode, the modes interleaved (a busy minute on a shared machine falls on all of them); jobs/s
from the first claim to the last settle, read from the database, and the worker process's own
CPU per job (user + system, from the kernel's accounting of the child): on a machine shared
with other work the wall clock swings by 2x between rounds, the CPU a job costs much less. Then
the cost of each record call, timed in this process.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MODES = {"off": {}, "sdk": {"BENCH_METRICS": "1"},
         "sdk+hooks": {"BENCH_METRICS": "1", "BENCH_HOOKS": "1"}}


def configure_sdk() -> None:
    """Install an SDK meter provider with a Prometheus reader (not scraped)."""
    from opentelemetry import metrics
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider

    metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))


def _noop_receiver(sender: Any, **kwargs: Any) -> None:
    return None


def connect_hooks() -> None:
    """A receiver of each run hook that does nothing: the cost of sending them."""
    from django_ultjobs.signals import job_finished, job_started

    job_started.connect(_noop_receiver, dispatch_uid="bench-started")
    job_finished.connect(_noop_receiver, dispatch_uid="bench-finished")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engine", default="postgres")
    args = parser.parse_args()
    os.environ.update(DJANGO_SETTINGS_MODULE="benchmarks.settings", BENCH_ALIAS=args.engine)
    import django

    django.setup()
    _reset_database(args.engine)
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
    modes = list(MODES)
    for round_ in range(args.repeat):
        # Each round starts with another mode, so no mode always drains first or last.
        for mode in modes[round_ % 3:] + modes[:round_ % 3]:
            rate, cpu_us = _drain(args.engine, args.jobs, args.threads, MODES[mode])
            rates[mode].append(rate)
            cpu[mode].append(cpu_us)
            print(f"round {round_ + 1} {mode}: {rate:,.0f} jobs/s, {cpu_us:.0f} µs CPU/job",
                  flush=True)
    base = statistics.median(rates["off"])
    base_cpu = statistics.median(cpu["off"])
    print(f"\n{args.jobs:,} no-op jobs, one worker process x {args.threads} threads, "
          f"{args.engine}, medians of {args.repeat}:\n")
    print("mode | drain jobs/s | vs no SDK | worker CPU µs/job | vs no SDK")
    print("--- | --- | --- | --- | ---")
    for mode in MODES:
        median, median_cpu = statistics.median(rates[mode]), statistics.median(cpu[mode])
        print(f"{mode} | {median:,.0f} | {median / base:.3f}x | {median_cpu:.0f} | "
              f"{median_cpu / base_cpu:.3f}x")
    _micro()
    return 0


def _reset_database(alias: str) -> None:
    """An empty, migrated database of the benchmark's own (PostgreSQL: dropped and created)."""
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    conf = settings.DATABASES[alias]
    connections[alias].close()
    if conf["ENGINE"].endswith("sqlite3"):
        for suffix in ("", "-wal", "-shm"):
            Path(conf["NAME"] + suffix).unlink(missing_ok=True)
    else:
        import psycopg

        with psycopg.connect(host=conf["HOST"], port=conf["PORT"], user=conf["USER"],
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{conf["NAME"]}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{conf["NAME"]}"')
    call_command("migrate", database=alias, verbosity=0)


def _empty(alias: str) -> None:
    """No rows, dead or alive: every drain starts from the same table (this server runs
    without autovacuum, and a DELETE would leave each drain more dead rows than the last)."""
    from django.db import connections

    from django_ultjobs.models import Job, JobAttempt

    if connections[alias].vendor != "postgresql":
        JobAttempt.objects.using(alias).all().delete()
        Job.objects.using(alias).all().delete()
        return
    with connections[alias].cursor() as cur:
        cur.execute(f"TRUNCATE {Job._meta.db_table} CASCADE")


def _analyze(alias: str) -> None:
    """Statistics for the queued rows, as autovacuum would have them in production."""
    from django.db import connections

    with connections[alias].cursor() as cur:
        cur.execute("ANALYZE")


def _drain(engine: str, jobs: int, threads: int, env: dict[str, str]) -> tuple[float, float]:
    """Drain ``jobs`` no-op jobs with one worker process; (jobs/s, the worker's CPU µs per
    job)."""
    from django.db import transaction
    from django.db.models import Max, Min

    from benchmarks.jobs import noop
    from django_ultjobs.models import Job

    _empty(engine)
    # The process's start and exit, alone (an empty queue): taken off the drain's CPU, so the
    # SDK's import is not counted as a cost per job.
    idle_s = _worker_cpu(engine, threads, env)
    with transaction.atomic(using=engine):
        for start in range(0, jobs, 5_000):
            noop.bulk_enqueue([()] * min(5_000, jobs - start))
    _analyze(engine)
    cpu_s = _worker_cpu(engine, threads, env) - idle_s
    done = Job.objects.using(engine).filter(status="succeeded")
    if done.count() != jobs:
        raise SystemExit(f"drain left {jobs - done.count()} jobs unfinished")
    span = done.aggregate(start=Min("claimed_at"), end=Max("finished_at"))
    return jobs / (span["end"] - span["start"]).total_seconds(), cpu_s / jobs * 1e6


def _worker_cpu(engine: str, threads: int, env: dict[str, str]) -> float:
    """Run one ``runjobworker --burst`` to its exit; the CPU seconds it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-m", "django", "runjobworker", "--database", engine, "--burst",
         "--threads", str(threads), "--visibility-timeout", "60", "--heartbeat-interval", "10"],
        env={**os.environ, "PYTHONPATH": str(REPO), **env}, cwd=REPO, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _micro() -> None:
    """Each hot-path call, timed alone: with no SDK, and with one."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from django_ultjobs.observability import metrics
    from django_ultjobs.signals import job_started

    batch = [("noop", "default", "succeeded", 0.001)] * 100

    def calls() -> dict[str, float]:
        n = 100_000
        return {
            "record_finished (one run)": _per_call(
                lambda: metrics.record_finished([("noop", "default", "succeeded", 0.001)]), n),
            "record_finished (per run, batch of 100)": _per_call(
                lambda: metrics.record_finished(batch), n // 100) / 100,
            "record_wait_on (instruments looked up)": _per_call(
                lambda: metrics.record_wait_on(metrics.instruments(), "noop", "default", 0.01), n),
            "job_started.send (no receiver)": _per_call(
                lambda: job_started.send(sender=None, context=None, args=[], kwargs={}), n),
        }

    off = calls()
    metrics.use_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    on = calls()
    metrics.use_meter_provider(None)
    print("\ncall | µs, no SDK | µs, SDK")
    print("--- | --- | ---")
    for name in off:
        print(f"{name} | {off[name]:.2f} | {on[name]:.2f}")


def _per_call(fn: Any, n: int) -> float:
    best = min(timeit.repeat(fn, number=n, repeat=3))
    return best / n * 1e6


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"\n{time.monotonic() - started:.0f} s in all")
    raise SystemExit(code)
