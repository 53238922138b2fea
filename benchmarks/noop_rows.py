"""Due no-op jobs written straight into the jobs table, for benchmarks that time one statement.

Going through ``enqueue`` would time the enqueue too; one ``INSERT … SELECT generate_series``
fills a backlog of any size in one round trip, with every column a row enqueued by the library
would hold.
"""

from __future__ import annotations

from typing import Any

QUEUED_NOOPS = (
    "INSERT INTO django_ultjobs_job (name, queue, priority, args, kwargs, status, attempt,"
    " max_attempts, visible_at, worker_id, cancel_requested, traceparent, tracestate,"
    " enqueued_by, last_error, wait_after, wait_event, created_at, updated_at,"
    " concurrency_key, unique_for, cancel_reason, tags)"
    " SELECT 'benchmarks.jobs.noop', 'default', 0, '[]', '{}', 'queued', 0, 1,"
    " now() - interval '1 minute', '', false, '', '', '', '', 0, '', now(), now(), '', 0,"
    " '', '[]' FROM generate_series(1, %s)"
)


def insert_queued_noops(cur: Any, jobs: int) -> None:
    """Queue ``jobs`` due no-op jobs on ``default``; ``cur`` is a psycopg cursor or connection."""
    cur.execute(QUEUED_NOOPS, [jobs])
