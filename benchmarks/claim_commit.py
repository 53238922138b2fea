"""What waiting for the WAL flush costs a claim (rule 93 (unflushed-slot-release)).

    BENCH_PG_NAME=ultjobs_bench_x python -m benchmarks.claim_commit [--jobs 2000] [--limit 1]

On PostgreSQL, claims of ``--limit`` jobs each from one backlog, alternating claim by claim
between the claim as shipped (its commit waits for the flush) and the same claim with
``set_config('synchronous_commit', 'off', true)`` in it, as slot releases are sent
(rule 93 (unflushed-slot-release) says why claims are not), both in autocommit. Prints each one's
median and p99 and their ratio: stable on a shared machine where absolute times are not. With
``--limit 1`` a claim is what an idle worker sends when one job arrives.
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
    no_flush = get_store(alias)
    shipped_sql = shipped.sql["claim"]
    no_flush.sql = {**shipped.sql, "claim": shipped_sql.replace(
        "FROM chosen\n", "FROM chosen CROSS JOIN (SELECT set_config('synchronous_commit', "
        "'off', true)) AS c\n", 1)}
    assert no_flush.sql["claim"] != shipped_sql
    shipped.enqueue([NewJob(name="noop", queue="default", priority=0, args=[], kwargs={},
                            max_attempts=1) for _ in range(args.jobs)])
    with shipped.cursor() as cur:
        cur.execute("ANALYZE django_ultjobs_job")
    times: dict[str, list[float]] = {"shipped": [], "no_flush": []}
    while True:
        took = 0
        for label, store in (("shipped", shipped), ("no_flush", no_flush)):
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
    ratio = statistics.median(times["shipped"]) / statistics.median(times["no_flush"])
    print(f"the shipped claim (it waits for the flush) takes {ratio:.1f}x one that does not")
    return 0


if __name__ == "__main__":
    sys.exit(main())
