"""The statements a stats view would run (it does not exist yet), as raw SQL on PostgreSQL.

Per queue: jobs runnable now, scheduled for later, running, waiting on a fleet slot or a rate
limit, the oldest runnable job's age, whether the queue is paused; plus the workers alive. Two
ways of reading the live rows are timed:

- ``exact``: one grouped statement over every live row (what ``ultjobs stats`` and the admin's
  summary do through the ORM today);
- ``capped``: per queue, each count stops at ``CAP`` + 1 (shown as "10,000+") and the oldest age
  is one probe per status, so the work is bounded whatever the backlog.

The rest (slots held, rate-limit buckets ahead, pauses, workers) reads small tables and is the
same in both.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import connection

#: A count past this is shown as "more than"; it bounds what a capped count reads.
CAP = 10_000
LIVE = "j.status IN ('queued', 'running', 'waiting')"

EXACT = f"""
SELECT j.queue,
       count(*) FILTER (WHERE j.visible_at <= now()) AS runnable,
       count(*) FILTER (WHERE j.status = 'queued' AND j.visible_at > now()) AS scheduled,
       count(*) FILTER (WHERE j.status = 'running' AND j.visible_at > now()) AS running,
       count(*) FILTER (WHERE j.status = 'waiting' AND j.visible_at > now()) AS waiting_event,
       min(j.visible_at) FILTER (WHERE j.visible_at <= now()) AS oldest_runnable
FROM django_ultjobs_job AS j WHERE {LIVE} GROUP BY j.queue
"""


def _capped_count(condition: str) -> str:
    return (f"(SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j "
            f"WHERE j.queue = q.queue AND {LIVE} AND {condition} LIMIT {CAP + 1}) AS s)")


def _oldest(status: str) -> str:
    return (f"(SELECT min(j.visible_at) FROM django_ultjobs_job AS j WHERE j.queue = q.queue "
            f"AND {LIVE} AND j.status = '{status}' AND j.visible_at <= now())")


CAPPED = f"""
SELECT q.queue,
       {_capped_count("j.visible_at <= now()")} AS runnable,
       {_capped_count("j.status = 'queued' AND j.visible_at > now()")} AS scheduled,
       {_capped_count("j.status = 'running' AND j.visible_at > now()")} AS running,
       {_capped_count("j.status = 'waiting' AND j.visible_at > now()")} AS waiting_event,
       LEAST({_oldest('queued')}, {_oldest('running')}, {_oldest('waiting')}) AS oldest_runnable
FROM unnest(%(queues)s::text[]) AS q(queue)
"""
#: Runnable jobs of the kinds that cannot start now (every slot of their key held, or their rate
#: limit's budget spent), per queue.
BLOCKED = f"""
SELECT j.queue, count(*) FROM django_ultjobs_job AS j
WHERE {LIVE} AND j.visible_at <= now() AND j.name = ANY (%(names)s::text[])
GROUP BY j.queue
"""
BLOCKED_CAPPED = f"""
SELECT q.queue, (SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j
    WHERE j.queue = q.queue AND {LIVE} AND j.visible_at <= now()
      AND j.name = ANY (%(names)s::text[]) LIMIT {CAP + 1}) AS s)
FROM unnest(%(queues)s::text[]) AS q(queue)
"""
SLOTS_HELD = "SELECT key, count(*) FROM django_ultjobs_slot WHERE expires_at > now() GROUP BY key"
RATES_AHEAD = """
SELECT key FROM django_ultjobs_ratelimitbucket
WHERE tat - tolerance > (extract(epoch FROM now()) * 1000000)::bigint
"""
PAUSED = "SELECT queue FROM django_ultjobs_queuepause"
WORKERS_ALIVE = """
SELECT count(*) FROM django_ultjobs_worker
WHERE stopped_at IS NULL
  AND last_seen_at > now() - make_interval(secs => COALESCE(visibility_timeout, 30))
"""
QUEUES = """
SELECT DISTINCT q FROM django_ultjobs_worker AS w, jsonb_array_elements_text(w.queues) AS q
WHERE w.stopped_at IS NULL AND w.last_seen_at > now() - interval '1 day'
"""


def read(mode: str) -> dict[str, Any]:
    """Run the view's statements, live rows read ``exact`` or ``capped``; return its figures."""
    from django_ultjobs.core.slot_keys import slot_key_for
    from django_ultjobs.jobs.registry import registered_jobs

    with connection.cursor() as cur:
        cur.execute(SLOTS_HELD)
        held = dict(cur.fetchall())
        cur.execute(RATES_AHEAD)
        spent = {key for (key,) in cur.fetchall()}
        specs = registered_jobs()
        blocked = sorted(name for name, spec in specs.items()
                         if slot_key_for(name) in spent
                         or (spec.concurrency
                             and held.get(slot_key_for(name), 0) >= spec.concurrency))
        cur.execute(PAUSED)
        paused = [q for (q,) in cur.fetchall()]
        cur.execute(QUEUES)
        queues = sorted({q for (q,) in cur.fetchall()} | {s.queue for s in specs.values()}
                        | set(paused))
        if mode == "exact":
            cur.execute(EXACT)
            rows = cur.fetchall()
            cur.execute(BLOCKED, {"names": blocked})
        else:
            cur.execute(CAPPED, {"queues": queues})
            rows = cur.fetchall()
            cur.execute(BLOCKED_CAPPED, {"queues": queues, "names": blocked})
        waiting_slot = dict(cur.fetchall())
        cur.execute(WORKERS_ALIVE)
        alive = cur.fetchone()[0]
    return {"queues": [list(map(str, r)) for r in rows], "blocked": waiting_slot,
            "paused": paused, "workers_alive": alive}


def statements(mode: str) -> list[tuple[str, dict[str, Any]]]:
    """The live-row statements of ``mode`` with example parameters, for EXPLAIN."""
    queues = {"queues": ["default", "mail", "reports"],
              "names": [f"app.jobs.job_{i}" for i in range(3)]}
    if mode == "exact":
        return [(EXACT, {}), (BLOCKED, queues)]
    return [(CAPPED, queues), (BLOCKED_CAPPED, queues)]


def explain(mode: str) -> list[str]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the live-row statements of ``mode``."""
    plans = []
    with connection.cursor() as cur:
        for sql, params in statements(mode):
            cur.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)
            plans.append(sql.strip() + "\n" + "\n".join(r[0] for r in cur.fetchall()))
    return plans


def timed_read(mode: str) -> float:
    """One read of the view in ms."""
    started = time.perf_counter()
    read(mode)
    return (time.perf_counter() - started) * 1000
