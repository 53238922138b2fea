"""The jobs admin on a big table: 1,000,000 job rows on PostgreSQL, each page timed.

    .venv/bin/python -m benchmarks.admin_big_table [--rows 1000000] [--repeat 5] [--keep]

Creates a throwaway database (``ultjobs_admin_bench``, or $BENCH_PG_NAME), migrates it, fills
the jobs table with ``INSERT … SELECT generate_series`` (mostly succeeded, a tail of failed and
cancelled, a few thousand queued, a hundred running, half of them with a lapsed lease), runs
VACUUM ANALYZE as autovacuum would, then renders each admin page through Django's test client
as a superuser and prints the median time, the number of queries, and whether any query counted
the jobs table without a LIMIT (a full count). The database is dropped at the end unless
``--keep``. Not a test: it takes about a minute, most of it writing the million rows.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass

import django
from django.conf import settings

DB_NAME = os.environ.get("BENCH_PG_NAME", "ultjobs_admin_bench")
PG = {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": DB_NAME,
    "USER": os.environ.get("ULTJOBS_PG_USER", "postgres"),
    "HOST": os.environ.get("ULTJOBS_PG_HOST", "127.0.0.1"),
    "PORT": os.environ.get("ULTJOBS_PG_PORT", "5432"),
}
#: A COUNT of the jobs table with neither a WHERE nor a LIMIT: the full count the admin must
#: never run. (A count that is bounded in SQL but still scans is caught by the seq scan check.)
FULL_COUNT = re.compile(r'COUNT\(.*FROM "django_ultjobs_job"(?!.*(WHERE|LIMIT))', re.S | re.I)
JOB_TABLE = "django_ultjobs_job"
ATTEMPT_TABLE = "django_ultjobs_jobattempt"

FILL = """
INSERT INTO django_ultjobs_job
    (name, queue, priority, args, kwargs, status, attempt, max_attempts, visible_at,
     worker_id, claimed_at, cancel_requested, wait_event, wait_after, traceparent, tracestate,
     enqueued_by, last_error, created_at, updated_at, finished_at)
SELECT
    CASE WHEN g %% 10000 = 1 THEN 'app.jobs.rare' ELSE 'app.jobs.job_' || (g %% 20) END,
    CASE WHEN g %% 5000 = 2 THEN 'bulk' WHEN g %% 10 = 0 THEN 'mail'
         WHEN g %% 10 = 1 THEN 'reports' ELSE 'default' END,
    0, jsonb_build_array(g, 'payload'), '{}'::jsonb, s.status,
    CASE WHEN s.status IN ('queued', 'waiting') THEN 0 ELSE 1 END, 3,
    CASE WHEN s.status = 'running' AND g %% 2 = 0 THEN now() + interval '10 minutes'
         WHEN s.status = 'running' THEN now() - interval '1 minute'
         WHEN s.status = 'queued' AND g %% 3 = 0 THEN now() + interval '10 minutes'
         WHEN s.status = 'waiting' THEN now() + interval '1 hour'
         ELSE now() - (%(rows)s - g) * interval '1 second' END,
    CASE WHEN s.status = 'queued' THEN '' ELSE 'bench-' || (g %% 8) || ':100:abcdef' END,
    CASE WHEN s.status = 'queued' THEN NULL ELSE now() - (%(rows)s - g) * interval '1 second' END,
    false, '', 0, '', '', 'bench', CASE WHEN s.status = 'failed' THEN 'Traceback …' ELSE '' END,
    now() - (%(rows)s - g) * interval '1 second',
    now() - (%(rows)s - g) * interval '1 second',
    CASE WHEN s.status IN ('succeeded', 'failed', 'cancelled')
         THEN now() - (%(rows)s - g) * interval '1 second' + interval '1 second' END
FROM generate_series(1, %(rows)s) AS g
CROSS JOIN LATERAL (SELECT CASE
    WHEN g > %(rows)s - 100 THEN 'running'
    WHEN g > %(rows)s - 5100 THEN 'queued'
    WHEN g %% 2000 = 3 THEN 'waiting'
    WHEN g %% 67 = 0 THEN 'failed'
    WHEN g %% 197 = 0 THEN 'cancelled'
    ELSE 'succeeded' END AS status) AS s
"""
ATTEMPTS = """
INSERT INTO django_ultjobs_jobattempt
    (job_id, attempt, worker_id, started_at, finished_at, outcome, error, slot_key, slot,
     steps_run, steps_replayed)
SELECT j.id, 1, j.worker_id, j.created_at, j.created_at + interval '1 second',
       CASE WHEN j.id %% 500 = 0 THEN 'slot_lost' ELSE j.status END, '',
       CASE WHEN j.id %% 500 = 0 THEN 'job:' || j.name ELSE '' END,
       CASE WHEN j.id %% 500 = 0 THEN 0 END, '[]'::jsonb, '[]'::jsonb
FROM django_ultjobs_job AS j
WHERE j.status IN ('succeeded', 'failed', 'cancelled')
"""
#: A busy last hour for the charts (the history above ends 85 minutes ago, where the queued and
#: running tail begins): attempts of finished jobs spread over the hour, a few failing and
#: retrying, runs of 10 ms to a few seconds.
RECENT_ATTEMPTS = """
INSERT INTO django_ultjobs_jobattempt
    (job_id, attempt, worker_id, started_at, finished_at, outcome, error, slot_key, slot,
     steps_run, steps_replayed)
SELECT j.id, 2, 'bench-1:100:abcdef', f.at - (0.01 + (g %% 300) / 100.0) * interval '1 second',
       f.at, CASE WHEN g %% 50 = 0 THEN 'failed' WHEN g %% 23 = 0 THEN 'retrying'
                  ELSE 'succeeded' END, '', '', NULL, '[]'::jsonb, '[]'::jsonb
FROM generate_series(1, %(recent)s) AS g
CROSS JOIN LATERAL (SELECT now() - (g * 3600.0 / %(recent)s) * interval '1 second' AS at) AS f
JOIN django_ultjobs_job AS j ON j.id = 1 + (g * 7919) %% (%(rows)s - 6000)
"""
LEASES = """
INSERT INTO django_ultjobs_slot (key, slot, holder, acquired_at, expires_at)
SELECT 'job:app.jobs.job_' || (j.id %% 20), row_number() OVER (PARTITION BY j.id %% 20) - 1,
       j.worker_id || ':' || j.id, now() - interval '5 seconds',
       CASE WHEN j.visible_at > now() THEN now() + interval '10 minutes'
            ELSE now() - interval '40 seconds' END
FROM django_ultjobs_job AS j WHERE j.status = 'running'
"""
WORKERS = """
INSERT INTO django_ultjobs_worker
    (id, hostname, pid, threads, queues, started_at, last_seen_at, in_flight, stopped_at)
SELECT 'bench-' || w || ':100:abcdef', 'bench-' || w, 100, 16, '["default", "mail"]'::jsonb,
       now() - interval '2 hours', now() - interval '2 seconds', 12, NULL
FROM generate_series(0, 7) AS w
"""


def configure() -> None:
    """Settings for a site whose admin and jobs share one PostgreSQL database."""
    settings.configure(
        SECRET_KEY="benchmark-only",
        DEBUG=False,
        USE_TZ=True,
        ALLOWED_HOSTS=["testserver"],
        INSTALLED_APPS=[
            "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
            "django.contrib.sessions", "django.contrib.messages", "django_ultjobs",
        ],
        DATABASES={"default": PG},
        ULTJOBS={"DATABASE": "default"},
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        ROOT_URLCONF=__name__,
        TEMPLATES=[{
            "BACKEND": "django.template.backends.django.DjangoTemplates",
            "APP_DIRS": True,
            "OPTIONS": {"context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]},
        }],
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        LOGGING_CONFIG=None,
    )
    django.setup()


def _urls() -> list:
    from django.contrib import admin
    from django.urls import path

    return [path("admin/", admin.site.urls)]


def __getattr__(name: str) -> list:
    # ROOT_URLCONF is this module; its urlpatterns are built only once Django is set up.
    if name == "urlpatterns":
        return _urls()
    raise AttributeError(name)


def _noop() -> None:
    return None


def register_jobs() -> None:
    """Register the jobs the rows name, as the site's jobs.py modules would."""
    from django_ultjobs import job

    for i in range(20):
        job(name=f"app.jobs.job_{i}", concurrency=4 if i < 3 else None)(_noop)
    job(name="app.jobs.rare")(_noop)


def admin_connection(dbname: str) -> object:
    """An autocommit connection to ``dbname`` for CREATE/DROP DATABASE."""
    import psycopg

    return psycopg.connect(host=PG["HOST"], port=PG["PORT"], user=PG["USER"], dbname=dbname,
                           autocommit=True)


@dataclass
class Timing:
    """One page's figures."""

    page: str
    median_ms: float
    best_ms: float
    queries: int
    full_counts: int
    rows_read: int
    slowest_sql_ms: float
    attempt_rows_read: int = 0


def fill(rows: int, recent: int) -> float:
    """Write ``rows`` jobs and their history, ``recent`` attempts in the last hour; return the
    seconds it took."""
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute(FILL, {"rows": rows})
        cur.execute(ATTEMPTS, {})
        if recent:
            cur.execute(RECENT_ATTEMPTS, {"rows": rows, "recent": recent})
        cur.execute(LEASES, {})
        cur.execute(WORKERS, {})
    with connection.cursor() as cur:
        # What autovacuum would have done on a table that grew to this size over days.
        cur.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def measure(client: object, name: str, url: str, repeat: int) -> Timing:
    """Render ``url`` once to warm up, then ``repeat`` times; return the figures."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    response = client.get(url)  # type: ignore[attr-defined]
    assert response.status_code == 200, (url, response.status_code)
    times: list[float] = []
    runs: list[CaptureQueriesContext] = []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as run:
            started = time.perf_counter()
            response = client.get(url)  # type: ignore[attr-defined]
            times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (url, response.status_code)
        runs.append(run)
    captured = runs[-1]
    full = [q["sql"] for q in captured.captured_queries if FULL_COUNT.search(q["sql"])]
    for sql in full:
        print(f"  FULL COUNT on {name}: {sql[:200]}", file=sys.stderr)
    rows_read = sum(_job_rows_read(q["sql"]) for q in captured.captured_queries)
    attempts_read = sum(_job_rows_read(q["sql"], ATTEMPT_TABLE)
                        for q in captured.captured_queries)
    slowest = max((float(q["time"]) for q in captured.captured_queries), default=0.0)
    return Timing(name, statistics.median(times), min(times), len(captured.captured_queries),
                  len(full), rows_read, slowest * 1000, attempts_read)


def _job_rows_read(sql: str, table: str = JOB_TABLE) -> int:
    """Return how many rows of the jobs table (or ``table``; or its index entries) ``sql`` read.

    From ``EXPLAIN ANALYZE``: the rows each scan node on the table returned plus those its
    filter threw away, times its loops. A list page should read about a page of rows; a full
    count, or an unindexed filter, reads the whole table.
    """
    from django.db import connection

    if table not in sql or not sql.lstrip().upper().startswith(("SELECT", "/*")):
        return 0
    with connection.cursor() as cur:
        cur.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        plan = cur.fetchone()[0]
    total = 0
    nodes = [plan[0]["Plan"]]
    while nodes:
        node = nodes.pop()
        if node.get("Relation Name") == table:
            per_loop = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            total += int(per_loop * node["Actual Loops"])
        nodes.extend(node.get("Plans", ()))
    return total


def pages(job_id: int) -> list[tuple[str, str]]:
    """The pages timed: every list, the in-flight view, filters, searches, a detail page."""
    base = "/admin/django_ultjobs/"
    return [
        ("jobs list (unfiltered)", f"{base}job/"),
        ("jobs list, page 3", f"{base}job/?p=3"),
        ("in-flight view", f"{base}inflightjob/"),
        ("filter status=failed", f"{base}job/?status__exact=failed"),
        ("filter status=cancelled", f"{base}job/?status__exact=cancelled"),
        ("filter status=queued", f"{base}job/?status__exact=queued"),
        ("filter status=succeeded", f"{base}job/?status__exact=succeeded"),
        ("filter name (50,000 rows)", f"{base}job/?name=app.jobs.job_3"),
        ("filter name (100 rows)", f"{base}job/?name=app.jobs.rare"),
        ("filter queue=mail", f"{base}job/?queue=mail"),
        ("filter queue=bulk (200 rows)", f"{base}job/?queue=bulk"),
        ("filter lease=lapsed", f"{base}job/?lease=lapsed"),
        ("search by id", f"{base}job/?q={job_id}"),
        ("search by name", f"{base}job/?q=job_7"),
        ("job detail", f"{base}job/{job_id}/change/"),
        ("held slots", f"{base}heldslot/"),
        ("lost-slot cancellations", f"{base}lostslotcancellation/"),
        ("workers", f"{base}worker/"),
        ("app index summary", f"{base}"),
        ("app index, 24 h charts", f"{base}?charts=24h"),
        ("name list + its charts", f"{base}job/?name=app.jobs.job_3"),
        ("name list + charts, 24 h", f"{base}job/?name=app.jobs.job_3&charts=24h"),
    ]


def main() -> int:
    """Create, fill, measure, report, drop."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--recent-attempts", type=int, default=60_000,
                        help="attempts finished in the last hour, for the charts")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()

    with admin_connection("postgres") as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')
        conn.execute(f'CREATE DATABASE "{DB_NAME}"')
    try:
        configure()
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.db import connection
        from django.test import Client
        from django.test.utils import setup_test_environment

        from django_ultjobs.models import Job, JobAttempt

        setup_test_environment()
        register_jobs()
        call_command("migrate", verbosity=0)
        seconds = fill(args.rows, args.recent_attempts)
        print(f"filled {Job.objects.count():,} jobs, {JobAttempt.objects.count():,} attempts "
              f"in {seconds:.1f} s "
              f"(PostgreSQL {connection.pg_version // 10000})")
        client = Client()
        client.force_login(User.objects.create_superuser("bench", password="bench"))
        job_id = Job.objects.filter(status="failed").order_by("-id").values_list(
            "id", flat=True)[0]
        results = [measure(client, name, url, args.repeat) for name, url in pages(job_id)]
        print(f"\n| {'page':30} | median ms | best ms | queries | slowest SQL ms "
              "| job rows read | attempt rows read | full counts |")
        print("|" + "|".join("-" * w for w in (32, 11, 9, 9, 16, 15, 19, 13)) + "|")
        for r in results:
            print(f"| {r.page:30} | {r.median_ms:9.1f} | {r.best_ms:7.1f} | {r.queries:7d} "
                  f"| {r.slowest_sql_ms:14.1f} | {r.rows_read:13,d} "
                  f"| {r.attempt_rows_read:17,d} | {r.full_counts:11d} |")
        full = sum(r.full_counts for r in results)
        print(f"\nfull-table counts: {full}")
        connection.close()
        return 1 if full else 0
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            with admin_connection("postgres") as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')


if __name__ == "__main__":
    sys.exit(main())
