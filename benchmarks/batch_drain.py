"""A batch's drain against the same drain without a batch (docs/workflows.md,
rule 113 (constant-bookkeeping)): no-op members whose settles count on the batch's callbacks.

    python -m benchmarks.batch_drain [--jobs 100000] [--pairs 3] [--threads 8]
                                     [--engine postgres|sqlite]

Each pair drains ``--jobs`` no-op jobs twice with one ``runjobworker --burst`` process, in
alternated order (plain first in odd pairs, batch first in even ones), from a fresh database:
once enqueued plainly, once as the members of one ``Batch`` with an ``on_success`` and an
``on_finish`` callback (so every settle batch writes the two callbacks' counters, the hot rows).
Jobs/s from the first claim to the last member's finish, on the database's clock; the callbacks'
runs are not counted. Prints each pair, and the median of the pairs' ratios (batch / plain).
PostgreSQL in a throwaway database (``ultjobs_batch_bench``); SQLite in a temporary file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--engine", choices=["postgres", "sqlite"], default="postgres")
    args = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, DJANGO_SETTINGS_MODULE="benchmarks.settings",
                   BENCH_ALIAS=args.engine, BENCH_PG_NAME="ultjobs_batch_bench", BENCH_TMP=tmp,
                   PYTHONPATH=str(REPO))
        for pair in range(args.pairs):
            order = ["plain", "batch"] if pair % 2 == 0 else ["batch", "plain"]
            rates = {kind: _drain(kind, args.jobs, args.threads, env) for kind in order}
            ratios.append(rates["batch"] / rates["plain"])
            print(f"pair {pair + 1}: plain {rates['plain']:,.0f} jobs/s, batch "
                  f"{rates['batch']:,.0f} jobs/s, ratio {ratios[-1]:.2f}", flush=True)
    print(f"{args.engine}, {args.jobs:,} no-op jobs, {args.threads} threads: batch / plain "
          f"median {statistics.median(ratios):.2f} over {args.pairs} pairs")


def _drain(kind: str, jobs: int, threads: int, env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-m", "benchmarks.batch_drain", "--one", kind,
                          str(jobs), str(threads)], env=env, cwd=REPO, check=True,
                         capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


ALIAS = os.environ.get("BENCH_ALIAS", "postgres")


def _reset_database() -> None:
    """An empty database, migrated: every drain measures the same thing."""
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

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


def one(kind: str, jobs: int, threads: int) -> None:
    """Reset the database, enqueue, drain with one worker process; print jobs/s."""
    import django
    django.setup()
    from django.db.models import Max, Min

    from benchmarks.jobs import noop
    from django_ultjobs import Batch
    from django_ultjobs.models import Job

    _reset_database()
    if kind == "batch":
        with Batch(on_success=noop.call(), on_finish=noop.call()) as batch:
            for start in range(0, jobs, 5_000):
                noop.bulk_enqueue([()] * min(5_000, jobs - start))
        members = Job.objects.using(ALIAS).filter(batch_id=batch.id)
    else:
        for start in range(0, jobs, 5_000):
            noop.bulk_enqueue([()] * min(5_000, jobs - start))
        members = Job.objects.using(ALIAS).all()
    subprocess.run([sys.executable, "-m", "django", "runjobworker", "--database", ALIAS,
                    "--burst", "--threads", str(threads), "--visibility-timeout", "60",
                    "--heartbeat-interval", "10"], check=True, cwd=REPO, env=os.environ)
    done = members.filter(status="succeeded")
    if done.count() != jobs:
        raise SystemExit(f"the {kind} drain left {jobs - done.count()} jobs unfinished")
    span = done.aggregate(start=Min("claimed_at"), end=Max("finished_at"))
    print(jobs / (span["end"] - span["start"]).total_seconds())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        one(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
