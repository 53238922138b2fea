"""What parking a job no worker knows costs on PostgreSQL (rule 12 (unknown-job-parked)).

    .venv/bin/python -m benchmarks.unknown_jobs [--legacy 20000] [--repeat 200]

Creates a throwaway database (``ultjobs_unknown_bench``, or $BENCH_PG_NAME), migrates it, and
times, median of ``--repeat``: one round trip (for scale); ``park_episodes`` for one orphan
whose history is one episode row (this version) and for one with ``--legacy`` park rows of one
attempt (what a version before episodes left behind: 2,880 a day); and a claim plus the settle
of one park that extends its episode. The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import psycopg

DB_NAME = os.environ.get("BENCH_PG_NAME", "ultjobs_unknown_bench")
os.environ.setdefault("BENCH_ALIAS", "postgres")
os.environ["BENCH_PG_NAME"] = DB_NAME
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")

LEGACY = """
INSERT INTO django_ultjobs_jobattempt
    (job_id, attempt, worker_id, started_at, finished_at, outcome, error, slot_key, slot,
     steps_run, steps_replayed, claims)
SELECT %(job)s, 1, 'old-worker', now() - g * interval '30 seconds',
       now() - g * interval '30 seconds', 'suspended', 'no job registered as "gone"', '', NULL,
       '[]', '[]', 1
FROM generate_series(1, %(rows)s) AS g
"""


def _admin() -> psycopg.Connection:
    return psycopg.connect(host=os.environ.get("ULTJOBS_PG_HOST", "127.0.0.1"),
                           user=os.environ.get("ULTJOBS_PG_USER", "postgres"),
                           port=os.environ.get("ULTJOBS_PG_PORT", "5432"),
                           dbname="postgres", autocommit=True)


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--legacy", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    with _admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')
        admin.execute(f'CREATE DATABASE "{DB_NAME}"')
    try:
        _run(args.legacy, args.repeat)
    finally:
        from django.db import connections
        connections.close_all()
        with _admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')


def _run(legacy: int, repeat: int) -> None:
    import django
    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from django_ultjobs.store import NewJob, get_store
    from django_ultjobs.store.records import Settlement
    from django_ultjobs.worker.settlements import UNKNOWN_JOB_PREFIX

    call_command("migrate", database="postgres", verbosity=0)
    store = get_store("postgres")
    new = NewJob(name="gone", queue="default", priority=0, args=[], kwargs={}, max_attempts=3)
    fresh, old = (row.id for row in store.enqueue([new, new]))
    (claimed,) = [j for j in store.claim(worker_id="w", queues=["default"], limit=1,
                                         visibility_timeout=30, caps={}) if j.id == fresh]
    park = Settlement(job_id=fresh, token=claimed.token, status="queued", attempt_no=1,
                      started_at=claimed.claimed_at, outcome="suspended", attempt_delta=-1,
                      delay=0.0, error=f'{UNKNOWN_JOB_PREFIX}"gone"')
    store.settle([park], "w")
    with connections["postgres"].cursor() as cur:
        cur.execute(LEGACY, {"job": old, "rows": legacy})
        cur.execute("ANALYZE django_ultjobs_jobattempt")
    trip = _median_ms(store.db_now, repeat)  # one round trip, for scale
    one = _median_ms(lambda: store.park_episodes([fresh], UNKNOWN_JOB_PREFIX, 604800), repeat)
    many = _median_ms(lambda: store.park_episodes([old], UNKNOWN_JOB_PREFIX, 604800), repeat)
    (episode,) = store.park_episodes([fresh], UNKNOWN_JOB_PREFIX, 604800).values()

    def park_again() -> None:
        (job,) = store.claim(worker_id="w", queues=["default"], limit=1, visibility_timeout=30,
                             caps={})
        store.settle([Settlement(job_id=job.id, token=job.token, status="queued",
                                 attempt_no=job.attempt, started_at=job.claimed_at,
                                 outcome="suspended", attempt_delta=-1, delay=0.0,
                                 error=park.error, extends=episode.attempt_id)], "w")

    with connections["postgres"].cursor() as cur:
        cur.execute("UPDATE django_ultjobs_job SET visible_at = now() + interval '1 day' "
                    "WHERE id = %s", [old])
    cycle = _median_ms(park_again, repeat)
    with connections["postgres"].cursor() as cur:
        cur.execute("SELECT count(*), max(claims) FROM django_ultjobs_jobattempt "
                    "WHERE job_id = %s", [fresh])
        rows, claims = cur.fetchone()
    print(f"one round trip (SELECT now()):             {trip:.3f} ms")
    print(f"park_episodes, one episode row:            {one:.3f} ms")
    print(f"park_episodes, {legacy:,} legacy park rows: {many:.3f} ms")
    print(f"claim + extending settle of one park:      {cycle:.3f} ms")
    print(f"after {repeat + 1} parks: {rows} attempt row(s), claims = {claims}")


if __name__ == "__main__":
    main()
