"""What the gauge sampler's read costs the database: ``gauge_rows()`` (the two statements one
worker of the fleet runs once a ``GAUGE_INTERVAL``) against a job table holding N runnable jobs
over Q queues plus a history of finished ones.

    python -m benchmarks.gauge_cost [--runnable 10000,100000,1000000] [--finished 1000000]

PostgreSQL only (the production engine); a database of its own, dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runnable", default="10000,100000,1000000")
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    os.environ.update(DJANGO_SETTINGS_MODULE="benchmarks.settings", BENCH_ALIAS="postgres",
                      BENCH_PG_NAME=os.environ.get("BENCH_PG_NAME", "ultjobs_gauge_cost"))
    import django

    django.setup()
    from django.db import connections

    from benchmarks.metrics_cost import _reset_database
    from django_ultjobs.store import get_store
    from django_ultjobs.worker.gauges import DEPTH_CAP

    _reset_database("postgres")
    store = get_store("postgres")
    _insert(connections["postgres"], "succeeded", args.finished, args.queues)
    print(f"{args.finished:,} finished jobs in the table, {args.queues} queues\n")
    print("runnable jobs | gauge_rows() ms, median | p95")
    print("--- | --- | ---")
    total = 0
    for n in (int(x) for x in args.runnable.split(",")):
        _insert(connections["postgres"], "queued", n - total, args.queues)
        total = n
        with connections["postgres"].cursor() as cur:
            cur.execute("ANALYZE")
        timings = []
        for _ in range(args.samples):
            started = time.perf_counter()
            store.gauge_rows(DEPTH_CAP)
            timings.append((time.perf_counter() - started) * 1000)
        timings.sort()
        print(f"{n:,} | {statistics.median(timings):.1f} | "
              f"{timings[int(len(timings) * 0.95) - 1]:.1f}")
    return 0


def _insert(connection: object, status: str, n: int, queues: int) -> None:
    """``n`` jobs of ``status`` in one statement, spread over ``queues`` queues."""
    if n <= 0:
        return
    with connection.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute(
            "INSERT INTO django_ultjobs_job (name, queue, priority, args, kwargs, status, "
            "attempt, max_attempts, visible_at, worker_id, cancel_requested, traceparent, "
            "tracestate, enqueued_by, last_error, wait_event, wait_after, created_at, "
            "updated_at, finished_at) "
            "SELECT 'noop', 'q' || (i %% %s), 0, '[]', '{}', %s, 0, 3, "
            "now() - (i || ' ms')::interval, '', false, '', '', '', '', '', 0, now(), now(), "
            "CASE WHEN %s = 'succeeded' THEN now() END "
            "FROM generate_series(1, %s) AS i",
            [queues, status, status, n])


if __name__ == "__main__":
    raise SystemExit(main())
