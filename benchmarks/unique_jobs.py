"""What a unique key costs an enqueue (rules 65 (one-key-holder) to 67 (unique-for-window)), on
PostgreSQL or SQLite.

    .venv/bin/python -m benchmarks.unique_jobs [--engine postgres|sqlite] [--calls 400]
                                               [--rounds 5] [--batch 100]

Times, per call, in interleaved rounds (a noisy machine slows every variant alike; the table
gives the median of the rounds' means): ``enqueue()`` without a key; with a key no row holds (an
insert); with a key a queued job holds (the holder is returned); with a key whose holder
finished long ago (the key is taken over); and ``bulk_enqueue`` of ``--batch`` calls without
keys, with new keys, and with held keys. The calls of a round run inside one transaction (as a
view's ``atomic()`` would), so the figures are the statements' cost, not the commit's (which on
this machine's disk is most of an enqueue that commits alone). PostgreSQL
runs in a throwaway database (``ultjobs_unique_bench``, or $BENCH_PG_NAME), dropped at the end;
SQLite in a temporary file, in the IMMEDIATE mode docs/deployment.md recommends.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import psycopg

DB_NAME = os.environ.get("BENCH_PG_NAME", "ultjobs_unique_bench")


def _admin() -> psycopg.Connection:
    return psycopg.connect(host=os.environ.get("ULTJOBS_PG_HOST", "127.0.0.1"),
                           user=os.environ.get("ULTJOBS_PG_USER", "postgres"),
                           port=os.environ.get("ULTJOBS_PG_PORT", "5432"),
                           dbname="postgres", autocommit=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    os.environ["BENCH_ALIAS"] = args.engine
    os.environ["BENCH_PG_NAME"] = DB_NAME
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["BENCH_TMP"] = tmp
        if args.engine == "postgres":
            with _admin() as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')
                admin.execute(f'CREATE DATABASE "{DB_NAME}"')
        try:
            _run(args.engine, args.calls, args.rounds, args.batch)
        finally:
            from django.db import connections
            connections.close_all()
            if args.engine == "postgres":
                with _admin() as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')


def _run(engine: str, calls: int, rounds: int, batch: int) -> None:
    import django
    django.setup()
    from django.core.management import call_command
    from django.db import connections, transaction

    from benchmarks.jobs import noop
    from django_ultjobs import bulk_enqueue

    call_command("migrate", database=engine, verbosity=0)
    fresh = iter(range(10**9))
    # Holders that finished an hour ago, one per call of every round of the take-over variant.
    expired = [f"done-{i}" for i in range(calls * rounds)]
    bulk_enqueue(noop.using(unique_key=key).call() for key in expired)
    with connections[engine].cursor() as cur:
        cur.execute("UPDATE django_ultjobs_job SET status = 'succeeded', finished_at = "
                    + ("now() - interval '1 hour'" if engine == "postgres"
                       else "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hour')"))
    noop.using(unique_key="held").enqueue()
    takeovers = iter(expired)
    variants: dict[str, tuple[Callable[[], object], int]] = {
        "enqueue(), no key": (lambda: noop.enqueue(), 1),
        "enqueue(), a key nobody holds": (
            lambda: noop.using(unique_key=f"new-{next(fresh)}").enqueue(), 1),
        "enqueue(), a key a queued job holds": (
            lambda: noop.using(unique_key="held").enqueue(), 1),
        "enqueue(), a key whose holder finished": (
            lambda: noop.using(unique_key=next(takeovers)).enqueue(), 1),
        f"bulk_enqueue({batch}), no keys": (
            lambda: bulk_enqueue([noop.call() for _ in range(batch)]), batch),
        f"bulk_enqueue({batch}), new keys": (
            lambda: bulk_enqueue([noop.using(unique_key=f"new-{next(fresh)}").call()
                                  for _ in range(batch)]), batch),
        f"bulk_enqueue({batch}), held keys": (
            lambda: bulk_enqueue([noop.using(unique_key="held").call()
                                  for _ in range(batch)]), batch),
    }
    means: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (call, per) in variants.items():
            repeat = max(1, calls // per)
            start = time.perf_counter()
            with transaction.atomic(using=engine):
                for _ in range(repeat):
                    call()
            means[name].append((time.perf_counter() - start) * 1000 / (repeat * per))
    base = statistics.median(means["enqueue(), no key"])
    bulk_base = statistics.median(means[f"bulk_enqueue({batch}), no keys"])
    print(f"| {engine}: per job | ms | vs no key |")
    print("|---|--:|--:|")
    for name, values in means.items():
        median = statistics.median(values)
        ratio = median / (bulk_base if name.startswith("bulk") else base)
        print(f"| {name} | {median:.3f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
