"""What preparing the claim saves, and that its generic plan keeps up.

    BENCH_PG_NAME=ultjobs_bench_x python -m benchmarks.claim_prepared [--queued 40000]
        [--limit 1] [--claims 600] [--before-sql FILE]

On PostgreSQL, claims of ``--limit`` jobs each through the store (autocommit, as a worker sends
them), from a backlog of ``--queued`` due jobs (topped up untimed before each claim when it is
under 1,000), alternating claim by claim between: the claim sent unprepared
(``prepare_threshold`` off) and prepared (``prepare_threshold=0``; PostgreSQL's own
``plan_cache_mode``, so after five custom plans it keeps the generic one only if it costs it no
more), and, with ``--before-sql``, an older claim text sent both ways. Prints medians, p90s and
the ratios of the medians, and which plans the prepared statement ran (``pg_prepared_statements``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from benchmarks.noop_rows import insert_queued_noops


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=40_000)
    parser.add_argument("--limit", type=int, default=1)
    parser.add_argument("--claims", type=int, default=600)
    parser.add_argument("--before-sql", help="a file holding an older claim text (unprepared)")
    args = parser.parse_args()
    os.environ.setdefault("BENCH_ALIAS", "postgres")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from django_ultjobs.store import get_store

    alias = "postgres"
    call_command("migrate", database=alias, verbosity=0)
    store = get_store(alias)
    variants: dict[str, tuple[Any, int | None]] = {"unprepared": (store, None),
                                                   "prepared": (store, 0)}
    if args.before_sql:
        before = get_store(alias)
        with open(args.before_sql) as f:
            before.sql = {**store.sql, "claim": f.read()}
        variants["before"] = (before, None)
        variants["before, prepared"] = (before, 0)
    raw = connections[alias]
    raw.ensure_connection()
    with raw.connection.cursor() as cur:
        cur.execute("TRUNCATE django_ultjobs_job CASCADE")
        insert_queued_noops(cur, args.queued)
        cur.execute("VACUUM (ANALYZE) django_ultjobs_job")
    times: dict[str, list[float]] = {label: [] for label in variants}
    for _ in range(args.claims):
        for label, (each, threshold) in variants.items():
            if args.queued < 1000:
                with raw.connection.cursor() as cur:
                    insert_queued_noops(cur, args.limit)
            raw.connection.prepare_threshold = threshold
            began = time.perf_counter()
            got = each.claim(worker_id="bench", queues=["default"], limit=args.limit,
                             visibility_timeout=600.0, caps={})
            times[label].append(time.perf_counter() - began)
            assert len(got) == args.limit, (label, len(got))
    for label, values in times.items():
        values.sort()
        print(f"{label}: median {statistics.median(values) * 1e3:.3f} ms, "
              f"p90 {values[int(len(values) * 0.9)] * 1e3:.3f} ms ({len(values)} claims of "
              f"{args.limit}, {args.queued} queued)")
    base = statistics.median(times["unprepared"])
    for label in variants:
        print(f"{label} / unprepared: {statistics.median(times[label]) / base:.2f}")
    with raw.connection.cursor() as cur:
        cur.execute("SELECT generic_plans, custom_plans, position('AS fence' IN statement) > 0"
                    " FROM pg_prepared_statements"
                    " WHERE statement LIKE '/* django_ultjobs:claim */%%'")
        for generic, custom, fenced in cur.fetchall():
            print(f"prepared claim ({'now' if fenced else 'before'}): {generic} generic plans,"
                  f" {custom} custom")
    return 0



if __name__ == "__main__":
    sys.exit(main())
