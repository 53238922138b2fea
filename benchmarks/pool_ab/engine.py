"""One engine's interleaved drains for ``benchmarks.pool_ab`` (run in its own process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connections, transaction  # noqa: E402
from django.db.models import Max, Min  # noqa: E402

from benchmarks.jobs import noop  # noqa: E402
from django_ultjobs.models import Job, JobAttempt, JobEvent, JobStep, Slot  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ALIAS = os.environ["BENCH_ALIAS"]


def reset_database() -> None:
    conf = settings.DATABASES[ALIAS]
    connections[ALIAS].close()
    if conf["ENGINE"].endswith("sqlite3"):
        for suffix in ("", "-wal", "-shm"):
            Path(conf["NAME"] + suffix).unlink(missing_ok=True)
    else:
        import psycopg

        with psycopg.connect(host=conf["HOST"], port=conf["PORT"], user=conf["USER"],
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{conf["NAME"]}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{conf["NAME"]}"')
    call_command("migrate", database=ALIAS, verbosity=0)


def enqueue(jobs: int) -> None:
    """An empty table, then ``jobs`` queued no-ops (ANALYZEd on PostgreSQL, as autovacuum would)."""
    with connections[ALIAS].cursor() as cur:
        for model in (JobAttempt, JobEvent, JobStep, Slot, Job):
            cur.execute(f"DELETE FROM {model._meta.db_table}")
    with transaction.atomic(using=ALIAS):
        for start in range(0, jobs, 5_000):
            noop.bulk_enqueue([()] * min(5_000, jobs - start))
    with connections[ALIAS].cursor() as cur:
        cur.execute("VACUUM ANALYZE" if connections[ALIAS].vendor == "postgresql" else "ANALYZE")
    connections[ALIAS].close()


def drain(pool: str, threads: int) -> dict:
    queued = Job.objects.using(ALIAS).filter(status="queued").count()
    with tempfile.NamedTemporaryFile(suffix=".cpu") as cpu:
        load = float(Path("/proc/loadavg").read_text().split()[0])
        subprocess.run(
            [sys.executable, "-m", "benchmarks.pool_ab.worker", pool, cpu.name,
             "--database", ALIAS, "--burst", "--threads", str(threads),
             "--visibility-timeout", "60", "--heartbeat-interval", "10"],
            env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, check=True)
        cpu_seconds = float(Path(cpu.name).read_text())
    done = Job.objects.using(ALIAS).filter(status="succeeded")
    if done.count() != queued:
        raise SystemExit(f"drain left {queued - done.count()} jobs unfinished")
    span = done.aggregate(start=Min("claimed_at"), end=Max("finished_at"))
    seconds = (span["end"] - span["start"]).total_seconds()
    connections[ALIAS].close()
    return {"jobs_s": queued / seconds, "cpu_us": cpu_seconds / queued * 1e6, "load": load}


def main() -> None:
    jobs, passes = int(sys.argv[1]), int(sys.argv[2])
    thread_counts = [int(t) for t in sys.argv[3].split(",")]
    reset_database()
    for n in range(passes):
        # Each pass alternates which pool goes first, so neither always meets the warmer cache.
        pools = ("ours", "executor") if n % 2 == 0 else ("executor", "ours")
        for threads in thread_counts:
            for pool in pools:
                enqueue(jobs)
                started = time.monotonic()
                result = drain(pool, threads)
                result.update(engine=ALIAS, pool=pool, threads=threads, pass_=n,
                              wall=time.monotonic() - started)
                print(json.dumps(result), flush=True)


main()
