"""One engine's measurements for ``benchmarks.throughput`` (run in its own process)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connections, transaction  # noqa: E402

from benchmarks.jobs import noop  # noqa: E402
from django_ultjobs.models import Job  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ALIAS = os.environ["BENCH_ALIAS"]


def reset_database() -> None:
    """Start from an empty database so every run measures the same thing."""
    conf = settings.DATABASES[ALIAS]
    if conf["ENGINE"].endswith("sqlite3"):
        connections[ALIAS].close()
        for suffix in ("", "-wal", "-shm"):
            Path(conf["NAME"] + suffix).unlink(missing_ok=True)
    else:
        import psycopg

        connections[ALIAS].close()
        with psycopg.connect(host=conf["HOST"], port=conf["PORT"], user=conf["USER"],
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{conf["NAME"]}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{conf["NAME"]}"')
    call_command("migrate", database=ALIAS, verbosity=0)


def bulk_enqueue(jobs: int) -> float:
    started = time.perf_counter()
    with transaction.atomic(using=ALIAS):
        for start in range(0, jobs, 5_000):
            noop.bulk_enqueue([()] * min(5_000, jobs - start))
    return jobs / (time.perf_counter() - started)


def single_enqueue_ms(count: int, in_transaction: bool) -> float:
    timings = []

    def one() -> None:
        t = time.perf_counter()
        noop.enqueue()
        timings.append(time.perf_counter() - t)

    if in_transaction:
        with transaction.atomic(using=ALIAS):
            for _ in range(count):
                one()
    else:
        for _ in range(count):
            one()
    return statistics.median(timings) * 1000


def drain(threads: int, processes: int) -> float:
    """Drain every queued job with ``processes`` real worker processes at once; jobs/s from first
    claim to last settle (the database's own timestamps), so process start-up is not counted."""
    queued = Job.objects.using(ALIAS).filter(status="queued").count()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "django", "runjobworker", "--database", ALIAS, "--burst",
             "--threads", str(threads), "--visibility-timeout", "60",
             "--heartbeat-interval", "10"],
            env=env, cwd=REPO)
        for _ in range(processes)
    ]
    failed = [w.args for w in workers if w.wait() != 0]
    if failed:
        raise SystemExit(f"{len(failed)} worker process(es) failed")
    done = Job.objects.using(ALIAS).filter(status="succeeded")
    if done.count() != queued:
        raise SystemExit(f"drain left {queued - done.count()} jobs unfinished")
    from django.db.models import Max, Min

    span = done.aggregate(start=Min("claimed_at"), end=Max("finished_at"))
    seconds = (span["end"] - span["start"]).total_seconds()
    return queued / seconds


def naive_baseline(jobs: int) -> float:
    """A queue without batching: claim one row per transaction, then ack it in another."""
    Job.objects.using(ALIAS).all().delete()
    with transaction.atomic(using=ALIAS):
        noop.bulk_enqueue([()] * jobs)
    conn = connections[ALIAS]
    conn.ensure_connection()
    raw = conn.connection
    sqlite = conn.vendor == "sqlite"
    claim = (
        "UPDATE django_ultjobs_job SET status = 'running', attempt = attempt + 1 "
        "WHERE id = (SELECT id FROM django_ultjobs_job WHERE status = 'queued' "
        "ORDER BY priority DESC, visible_at, id LIMIT 1"
        + ("" if sqlite else " FOR UPDATE SKIP LOCKED") + ") RETURNING id"
    )
    ack = ("UPDATE django_ultjobs_job SET status = 'succeeded' WHERE id = "
           + ("?" if sqlite else "%s"))
    started = time.perf_counter()
    done = 0
    cur = raw.cursor()
    while True:
        if sqlite:
            cur.execute("BEGIN IMMEDIATE")
        cur.execute(claim)
        row = cur.fetchone()
        raw.commit() if not sqlite else cur.execute("COMMIT")
        if row is None:
            break
        if sqlite:
            cur.execute("BEGIN IMMEDIATE")
        cur.execute(ack, (row[0],))
        raw.commit() if not sqlite else cur.execute("COMMIT")
        done += 1
    return done / (time.perf_counter() - started)


def main() -> None:
    jobs, threads, baseline_jobs, processes = (int(a) for a in sys.argv[1:5])
    reset_database()
    bulk = bulk_enqueue(jobs)
    commit_ms = single_enqueue_ms(300, in_transaction=False)
    txn_ms = single_enqueue_ms(300, in_transaction=True)
    rate = drain(threads, processes)
    baseline = naive_baseline(baseline_jobs)
    print(f"bulk={bulk}")
    print(f"single_commit_ms={commit_ms}")
    print(f"single_txn_ms={txn_ms}")
    print(f"drain={rate}")
    print(f"baseline={baseline}")


main()
