"""The rows ``python -m benchmarks.scale`` measures against, each table filled by ONE
``INSERT … SELECT`` (``generate_series`` on PostgreSQL, a recursive CTE on SQLite), never the ORM.

History (finished jobs) is spread over the last ``days`` days, ids in finish order as a table
that grew over those days has them, with the attempts stored as the workers store them (rule
97): a first attempt that succeeded plainly is held by the job's row (``attempt_on_row``, no
attempt row); a success after a retry, a failure after its three attempts and a cancelled run
have attempt rows. The mix per 10,000 jobs, spread evenly over them: 9,360 succeeded at the
first attempt, 400 after a retry, 200 failed (a traceback on the row and on each attempt), 40
cancelled (half never ran).
Twenty job names, the first few far more common, in three queues.

A column left out of an override takes the model's default, so a column added later is
filled too.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import Model

#: The registered job names the rows carry (``register_jobs``); the first three are capped.
NAMES = 20
CAPPED_NAMES = 3
#: A failure's error text: what a short traceback weighs.
TRACEBACK = ("Traceback (most recent call last):\n  File \"app/jobs.py\", line 42, in sync\n"
             "    response.raise_for_status()\nrequests.exceptions.HTTPError: 503 Server Error: "
             "Service Unavailable for url: https://api.example.com/v2/orders")


def insert_select(model: type[Model], overrides: dict[str, str], source: str,
                  params: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """``INSERT INTO <model's table> (...) SELECT <overrides> FROM <source>``: every column
    named in ``overrides`` (SQL expressions over ``source``), every other NOT NULL column
    without a database default given the model's default as a parameter."""
    columns, values, params = [], [], dict(params or {})
    for field in model._meta.concrete_fields:
        if field.column in overrides:
            columns.append(field.column)
            values.append(overrides[field.column])
        elif field.primary_key or field.has_db_default() or field.null:
            continue
        elif field.has_default():
            columns.append(field.column)
            values.append(f"%(default_{field.column})s")
            params[f"default_{field.column}"] = field.get_db_prep_save(field.get_default(),
                                                                      connection)
        else:
            raise RuntimeError(f"fill: no value for NOT NULL column {field.column}")
    sql = (f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) "
           f"SELECT {', '.join(values)} FROM {source}")
    return sql, params


# -- PostgreSQL ---------------------------------------------------------------------------------

#: Each generated job: its finish time (in id order, jittered), name, queue, and fate.
_HISTORY_SOURCE = f"""
generate_series(1, %(rows)s) AS g
CROSS JOIN LATERAL (SELECT
    now() - %(days)s * interval '1 day'
        + (g - random()) * (%(days)s * interval '1 day' - interval '1 second') / %(rows)s
        AS fin,
    (0.01 + power(random(), 3) * 5) * interval '1 second' AS took,
    (0.05 + power(random(), 4) * 30) * interval '1 second' AS waited,
    floor(power(random(), 2) * {NAMES})::int AS kind,
    random() AS r,
    (g::bigint * 7919 %% 10000) AS fate) AS t
CROSS JOIN LATERAL (SELECT
    CASE WHEN t.fate < 9360 THEN 'succeeded' WHEN t.fate < 9760 THEN 'retried'
         WHEN t.fate < 9960 THEN 'failed' WHEN t.fate < 9980 THEN 'cancelled_run'
         ELSE 'cancelled_queued' END AS fate) AS f
"""

_HISTORY_COLUMNS = {
    "name": "'app.jobs.job_' || t.kind",
    "queue": "CASE WHEN t.r < 0.7 THEN 'default' WHEN t.r < 0.9 THEN 'mail' ELSE 'reports' END",
    "args": "jsonb_build_array(g, 'customer-' || (g %% 5000))",
    "status": "CASE f.fate WHEN 'retried' THEN 'succeeded' WHEN 'cancelled_run' THEN "
              "'cancelled' WHEN 'cancelled_queued' THEN 'cancelled' ELSE f.fate END",
    "attempt": "CASE f.fate WHEN 'succeeded' THEN 1 WHEN 'retried' THEN 2 WHEN 'failed' THEN 3 "
               "WHEN 'cancelled_run' THEN 1 ELSE 0 END",
    "max_attempts": "3",
    "visible_at": "t.fin - t.took + interval '5 minutes'",
    "worker_id": "CASE WHEN f.fate = 'cancelled_queued' THEN '' "
                 "ELSE 'web-' || (g %% 8) || ':' || (1000 + g / 1000000) || ':0a1b2c' END",
    "claimed_at": "CASE WHEN f.fate = 'cancelled_queued' THEN NULL ELSE t.fin - t.took END",
    "cancel_requested": "f.fate LIKE 'cancelled%%'",
    "enqueued_by": "'app.views.checkout'",
    "last_error": f"CASE f.fate WHEN 'failed' THEN '{TRACEBACK}' ELSE '' END",
    "result": "CASE WHEN f.fate IN ('succeeded', 'retried') THEN jsonb_build_object('ok', g) END",
    "created_at": "t.fin - t.took - t.waited",
    "updated_at": "t.fin",
    "finished_at": "t.fin",
    "attempt_on_row": "f.fate = 'succeeded'",
}

#: The attempt rows of the jobs with id above ``since``: every attempt of a job whose row holds
#: none. The last is the job's outcome, the ones before it were retried.
_ATTEMPTS_SOURCE = """
django_ultjobs_job AS j
CROSS JOIN LATERAL generate_series(1, j.attempt) AS n
WHERE j.id > %(since)s AND j.attempt > 0 AND NOT j.attempt_on_row
"""
_ATTEMPTS_COLUMNS = {
    "job_id": "j.id",
    "attempt": "n",
    "worker_id": "j.worker_id",
    "started_at": "j.claimed_at - (j.attempt - n) * interval '1 minute'",
    "finished_at": "j.finished_at - (j.attempt - n) * interval '1 minute'",
    "outcome": "CASE WHEN n < j.attempt THEN 'retrying' ELSE j.status END",
    "error": f"CASE WHEN n < j.attempt OR j.status = 'failed' THEN '{TRACEBACK}' ELSE '' END",
    "slot_key": "''",
    "steps_run": "'[]'::jsonb",
    "steps_replayed": "'[]'::jsonb",
}


def fill_history(rows: int, days: float, seed: float = 0.42) -> tuple[int, int]:
    """Add ``rows`` finished jobs over the last ``days`` days, and their attempt rows; return
    how many of each."""
    from django_ultjobs.models import Job, JobAttempt

    with connection.cursor() as cur:
        cur.execute("SELECT setseed(%s)", [seed])
        cur.execute("SELECT COALESCE(max(id), 0) FROM django_ultjobs_job")
        since = cur.fetchone()[0]
        sql, params = insert_select(Job, _HISTORY_COLUMNS, _HISTORY_SOURCE,
                                    {"rows": rows, "days": days})
        cur.execute(sql, params)
        jobs = cur.rowcount
        sql, params = insert_select(JobAttempt, _ATTEMPTS_COLUMNS, _ATTEMPTS_SOURCE,
                                    {"since": since})
        cur.execute(sql, params)
        return jobs, cur.rowcount


#: The age in days of the finished job after the N oldest (``%s``): ``prunejobs --days`` at that
#: age prunes those N and keeps it, whatever span the history covers.
RETENTION_FOR = ("SELECT extract(epoch FROM now() - finished_at) / 86400 FROM django_ultjobs_job "
                 "WHERE status IN ('succeeded', 'failed', 'cancelled') "
                 "ORDER BY finished_at OFFSET %s LIMIT 1")


def retention_days(rows: int) -> float:
    """The ``prunejobs --days`` that prunes the ``rows`` oldest finished jobs."""
    with connection.cursor() as cur:
        cur.execute(RETENTION_FOR, [rows])
        row = cur.fetchone()
    return 0.0 if row is None else float(row[0])


def days_since_last_finish() -> float:
    """Days from the newest finish time to now: the span a cycle's rows finished over."""
    with connection.cursor() as cur:
        cur.execute("SELECT extract(epoch FROM now() - max(finished_at)) / 86400 "
                    "FROM django_ultjobs_job")
        days = cur.fetchone()[0]
    return max(float(days or 0.0), 1 / 86400)


#: A backlog: ``rows`` queued jobs enqueued over the last hour, a tenth of them scheduled for
#: later, plus a few running (a tenth with a lapsed lease) and waiting on an event.
_QUEUED_SOURCE = f"""
generate_series(1, %(rows)s) AS g
CROSS JOIN LATERAL (SELECT
    now() - interval '1 hour' + g * interval '1 hour' / %(rows)s AS at,
    floor(power(random(), 2) * {NAMES})::int AS kind, random() AS r,
    CASE WHEN g <= %(running)s THEN 'running'
         WHEN g <= %(running)s + %(waiting)s THEN 'waiting' ELSE 'queued' END AS status) AS t
"""
_QUEUED_COLUMNS = {
    "name": "'app.jobs.job_' || t.kind",
    "queue": "CASE WHEN t.r < 0.7 THEN 'default' WHEN t.r < 0.9 THEN 'mail' ELSE 'reports' END",
    "args": "jsonb_build_array(g, 'customer-' || (g %% 5000))",
    "status": "t.status",
    "attempt": "CASE t.status WHEN 'queued' THEN 0 ELSE 1 END",
    "visible_at": "CASE WHEN t.status = 'running' AND g %% 10 = 0 THEN now() - interval '1 minute'"
                  " WHEN t.status = 'running' THEN now() + interval '5 minutes'"
                  " WHEN t.status = 'waiting' THEN now() + interval '1 hour'"
                  " WHEN g %% 10 = 3 THEN now() + g %% 3600 * interval '1 second'"
                  " ELSE t.at END",
    "worker_id": "CASE t.status WHEN 'queued' THEN '' ELSE 'web-' || (g %% 8) || ':1:0a1b2c' END",
    "claimed_at": "CASE t.status WHEN 'queued' THEN NULL ELSE now() - interval '20 seconds' END",
    "claim_token": "CASE t.status WHEN 'queued' THEN NULL ELSE gen_random_uuid() END",
    "wait_event": "CASE t.status WHEN 'waiting' THEN 'order-paid' ELSE '' END",
    "enqueued_by": "'app.views.checkout'",
    "created_at": "t.at",
    "updated_at": "t.at",
}
#: The fleet as the workers page sees it after a month: eight workers alive, and a row for every
#: worker process that ran since (a deploy every hour or so, eight processes each).
_WORKERS = f"""
INSERT INTO django_ultjobs_worker
    (id, hostname, pid, threads, queues, started_at, last_seen_at, in_flight, stopped_at, jobs,
     visibility_timeout, heartbeat_interval, overrunning)
SELECT 'web-' || (w %% 8) || ':' || w || ':0a1b2c', 'web-' || (w %% 8), w, 16,
       '["default", "mail", "reports"]'::jsonb,
       now() - (%(dead)s - w + 1) * interval '1 hour' - interval '2 hours',
       CASE WHEN w >= %(dead)s THEN now() - interval '2 seconds'
            ELSE now() - (%(dead)s - w) * interval '1 hour' END,
       CASE WHEN w >= %(dead)s THEN 12 ELSE 0 END,
       CASE WHEN w >= %(dead)s THEN NULL ELSE now() - (%(dead)s - w) * interval '1 hour' END,
       (SELECT jsonb_agg('app.jobs.job_' || k) FROM generate_series(0, {NAMES - 1}) AS k),
       30, 10, '[]'::jsonb
FROM generate_series(0, %(dead)s + 7) AS w
ON CONFLICT (id) DO NOTHING
"""
#: The capped kinds' slots, every one held by a live worker (their queued runs wait for one).
_SLOTS = """
INSERT INTO django_ultjobs_slot (key, slot, holder, acquired_at, expires_at)
SELECT 'job:app.jobs.job_' || k, s, 'web-' || s || ':1:0a1b2c', now() - interval '5 seconds',
       now() + interval '10 minutes'
FROM generate_series(0, %(capped)s - 1) AS k, generate_series(0, 3) AS s
ON CONFLICT DO NOTHING
"""


#: The fleet's heartbeats at work: the live workers heartbeat and their slots are renewed, so the
#: pages see a running fleet however long ago the rows were written.
HEARTBEAT = (
    "UPDATE django_ultjobs_worker SET last_seen_at = CURRENT_TIMESTAMP "
    "WHERE stopped_at IS NULL AND id LIKE 'web-%%'",
    "UPDATE django_ultjobs_slot SET expires_at = CURRENT_TIMESTAMP + interval '10 minutes' "
    "WHERE holder LIKE 'web-%%'",
)


def heartbeat() -> None:
    """Touch the filled fleet's live workers and held slots, as their heartbeats would."""
    with connection.cursor() as cur:
        for statement in HEARTBEAT:
            if connection.vendor == "sqlite":
                # SQLite keeps times as text in Django's format, and has no intervals.
                statement = statement.replace(
                    "CURRENT_TIMESTAMP + interval '10 minutes'",
                    "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+10 minutes')").replace(
                    "CURRENT_TIMESTAMP", "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')")
            cur.execute(statement)


def fill_queued(rows: int, seed: float = 0.17) -> int:
    """Add a backlog of ``rows`` live jobs, the fleet's worker rows and held slots; return the
    jobs added."""
    from django_ultjobs.models import Job

    with connection.cursor() as cur:
        cur.execute("SELECT setseed(%s)", [seed])
        sql, params = insert_select(Job, _QUEUED_COLUMNS, _QUEUED_SOURCE,
                                    {"rows": rows, "running": 64, "waiting": 200})
        cur.execute(sql, params)
        added = cur.rowcount
        cur.execute(_WORKERS, {"dead": 720})
        cur.execute(_SLOTS, {"capped": CAPPED_NAMES})
    return added


# -- SQLite ---------------------------------------------------------------------------------------

_SQLITE_QUEUED_SOURCE = """
(WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < %(rows)s)
 SELECT g, abs(random()) %% 1000000 / 1000000.0 AS r1, abs(random()) %% 1000 / 1000.0 AS r,
        strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-3600 seconds',
                 '+' || (g * 3600.0 / %(rows)s) || ' seconds') AS at,
        strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+' || (g %% 3600) || ' seconds') AS later
 FROM s) AS t
"""
_SQLITE_QUEUED_COLUMNS = {
    "name": f"'app.jobs.job_' || CAST(t.r1 * t.r1 * {NAMES} AS INTEGER)",
    "queue": "CASE WHEN t.r < 0.7 THEN 'default' WHEN t.r < 0.9 THEN 'mail' ELSE 'reports' END",
    "args": "json_array(t.g, 'customer-' || (t.g %% 5000))",
    "status": "'queued'",
    "attempt": "0",
    "visible_at": "CASE WHEN t.g %% 10 = 3 THEN t.later ELSE t.at END",
    "worker_id": "''",
    "enqueued_by": "'app.views.checkout'",
    "created_at": "t.at",
    "updated_at": "t.at",
}


def fill_queued_sqlite(rows: int) -> int:
    """Add ``rows`` queued jobs on SQLite (a tenth scheduled for later), eight live workers
    and the capped kinds' held slots; return the jobs added."""
    from datetime import timedelta

    from django.utils import timezone

    from django_ultjobs.models import Job, Slot, Worker

    sql, params = insert_select(Job, _SQLITE_QUEUED_COLUMNS, _SQLITE_QUEUED_SOURCE,
                                {"rows": rows})
    with connection.cursor() as cur:
        cur.execute(sql, params)
        added = cur.rowcount
    now = timezone.now()
    names = [f"app.jobs.job_{k}" for k in range(NAMES)]
    # Eight rows and a dozen: the ORM is fine here.
    Worker.objects.bulk_create(
        Worker(id=f"web-{w}:1:0a1b2c", hostname=f"web-{w}", pid=w, threads=16,
               queues=["default", "mail", "reports"], started_at=now - timedelta(hours=2),
               last_seen_at=now, in_flight=12, jobs=names, visibility_timeout=30,
               heartbeat_interval=10, overrunning=[]) for w in range(8))
    Slot.objects.bulk_create(
        Slot(key=f"job:app.jobs.job_{k}", slot=s, holder=f"web-{s}:1:0a1b2c",
             expires_at=now + timedelta(minutes=10))
        for k in range(CAPPED_NAMES) for s in range(4))
    return added
