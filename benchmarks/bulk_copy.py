"""Bulk enqueue by COPY against the INSERT it replaces and against PgQueuer, in one run.

    .venv/bin/python -m benchmarks.bulk_copy [--jobs 50000] [--rounds 5]

Interleaved rounds (a noisy machine slows every variant alike; the medians are reported), each
enqueueing ``--jobs`` no-op jobs in chunks of ``benchmarks.peers.common.BULK_CHUNK`` in one
transaction, as ``python -m benchmarks.peers`` does:

- ``copy``: ``job.bulk_enqueue`` as shipped (COPY from ``COPY_MIN_JOBS`` jobs);
- ``insert``: the same call with COPY turned off (the one INSERT of a JSON array);
- ``pgqueuer``: PgQueuer's ``Queries.enqueue`` of the same number of jobs (asyncpg);
- ``copy store`` / ``insert store``: the store's part alone (the calls checked and built once,
  beforehand), which is what COPY changes.

Throwaway databases ``ultjobs_peers_ours_bulk`` and ``ultjobs_peers_pgq_bulk`` (each with
``$BENCH_DB_SUFFIX`` appended, for machines several people share), dropped at the end. Needs
the ``bench-peers`` extra (PgQueuer).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

SUFFIX = os.environ.get("BENCH_DB_SUFFIX", "")
OURS_DB, PGQ_DB = f"ultjobs_peers_ours_bulk{SUFFIX}", f"ultjobs_peers_pgq_bulk{SUFFIX}"
os.environ["BENCH_PEERS_DB"] = OURS_DB
os.environ["BENCH_PEERS_SYSTEM"] = "ours"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.peers.settings")


def _phase(module: str, phase: str, db: str) -> None:
    subprocess.run([sys.executable, "-m", module, phase, "--db", db], check=True,
                   stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bulk_copy")
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    _phase("benchmarks.peers.ours", "setup", OURS_DB)
    _phase("benchmarks.peers.peer_pgqueuer", "setup", PGQ_DB)
    try:
        _measure(args.jobs, args.rounds)
    finally:
        from django.db import connections

        connections.close_all()
        _phase("benchmarks.peers.ours", "teardown", OURS_DB)
        _phase("benchmarks.peers.peer_pgqueuer", "teardown", PGQ_DB)


def _measure(jobs: int, rounds: int) -> None:
    import django

    django.setup()
    from django.db import transaction

    from benchmarks.peers import jobs as peer_jobs
    from benchmarks.peers import ours, peer_pgqueuer
    from benchmarks.peers.common import BULK_CHUNK
    from django_ultjobs.store import copy_rows, get_store
    from django_ultjobs.store.base import JobStore

    store = get_store()
    news = [peer_jobs.peers_noop.call().new_job("", "", "") for _ in range(jobs)]

    def store_only(insert: Callable[[list], object]) -> float:
        started = time.perf_counter()
        with transaction.atomic():
            for start in range(0, jobs, BULK_CHUNK):
                insert(news[start:start + BULK_CHUNK])
        return jobs / (time.perf_counter() - started)

    def without_copy() -> float:
        copy_rows.COPY_MIN_JOBS, kept = sys.maxsize, copy_rows.COPY_MIN_JOBS
        try:
            return ours.bulk_enqueue(jobs)
        finally:
            copy_rows.COPY_MIN_JOBS = kept

    variants: dict[str, Callable[[], float]] = {
        "copy": lambda: ours.bulk_enqueue(jobs),
        "insert": without_copy,
        "pgqueuer": lambda: asyncio.run(peer_pgqueuer.bulk_enqueue(PGQ_DB, jobs)),
        "copy store": lambda: store_only(store.enqueue),
        "insert store": lambda: store_only(lambda batch: JobStore.enqueue(store, batch)),
    }
    figures: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            ours.reset()
            asyncio.run(peer_pgqueuer.reset(PGQ_DB))
            figures[name].append(run())
    median = {name: statistics.median(values) for name, values in figures.items()}
    print(f"{jobs:,} jobs, median of {rounds} interleaved rounds (jobs/s):")
    for name, value in median.items():
        print(f"  {name:<13} {value:>9,.0f}   ({', '.join(f'{v:,.0f}' for v in figures[name])})")
    print(f"copy / pgqueuer {median['copy'] / median['pgqueuer']:.2f}x; "
          f"copy / insert {median['copy'] / median['insert']:.2f}x; "
          f"store: copy / insert {median['copy store'] / median['insert store']:.2f}x")


if __name__ == "__main__":
    main()
