"""What waiting for the WAL flush costs a claim (performance.md, item 83; rule 93).

    BENCH_PG_NAME=ultjobs_bench_x python -m benchmarks.claim_commit [--jobs 2000] [--limit 1]

On PostgreSQL, claims of ``--limit`` jobs each from one backlog, alternating claim by claim
between the claim as shipped (its own transaction, committed without waiting for the flush) and
the same claim told it runs in a caller's transaction (so its commit waits, as every claim did
before rule 93), both in autocommit. Prints each one's median and p99 and their ratio: stable on
a shared machine where absolute times are not. With ``--limit 1`` a claim is what an idle worker
sends when one job arrives.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--limit", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from django_ultjobs.models import Job
    from django_ultjobs.store import NewJob, get_store

    alias = "postgres"
    call_command("migrate", database=alias, verbosity=0)
    Job.objects.using(alias).all().delete()
    shipped = get_store(alias)
    waiting = get_store(alias)
    waiting.in_callers_transaction = lambda conn: True  # type: ignore[method-assign]
    shipped.enqueue([NewJob(name="noop", queue="default", priority=0, args=[], kwargs={},
                            max_attempts=1) for _ in range(args.jobs)])
    with shipped.cursor() as cur:
        cur.execute("ANALYZE django_ultjobs_job")
    times: dict[str, list[float]] = {"shipped": [], "waiting": []}
    while True:
        took = 0
        for label, store in (("shipped", shipped), ("waiting", waiting)):
            began = time.perf_counter()
            took += len(store.claim(worker_id="bench", queues=["default"], limit=args.limit,
                                    visibility_timeout=600.0, caps={}))
            times[label].append(time.perf_counter() - began)
        if took < 2 * args.limit:
            break
    for label, values in times.items():
        values.sort()
        print(f"{label}: median {statistics.median(values) * 1e3:.3f} ms, "
              f"p99 {values[int(len(values) * 0.99)] * 1e3:.3f} ms ({len(values)} claims of "
              f"{args.limit})")
    ratio = statistics.median(times["waiting"]) / statistics.median(times["shipped"])
    print(f"a claim that waits for the flush takes {ratio:.1f}x the shipped one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
