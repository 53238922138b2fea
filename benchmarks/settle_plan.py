"""The prepared settle's plan across a drain.

    BENCH_PG_NAME=ultjobs_bench_x python -m benchmarks.settle_plan [--jobs 60000] [--batch 32]

A table of ``--jobs`` queued no-op jobs, ANALYZEd (the attempts table empty then, as in the
peer benchmark), drained on ONE connection that prepares at 5 runs, as a site with
``OPTIONS["prepare_threshold"] = 5`` does: the claim never prepared (as the store runs it), the
settle prepared, each its own transaction. Prints the settle's time per tenth of the drain, then
runs one more settle through the connection's prepared statement under EXPLAIN (ANALYZE,
BUFFERS) twice: ``plan_cache_mode = force_generic_plan`` (the plan it keeps) and
``force_custom_plan`` (planned afresh for these values, as an unprepared settle is), each rolled
back. The database is the benchmarks' PostgreSQL one (``BENCH_PG_NAME``); its jobs and attempts
are deleted first.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
import uuid
from datetime import datetime
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
os.environ["BENCH_ALIAS"] = "postgres"

import django

django.setup()

import psycopg  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connections  # noqa: E402
from psycopg import sql  # noqa: E402

from benchmarks.noop_rows import insert_queued_noops  # noqa: E402
from django_ultjobs.sql import queries  # noqa: E402
from django_ultjobs.store.postgresql import claim_text  # noqa: E402
from django_ultjobs.store.records import Settlement  # noqa: E402
from django_ultjobs.store.settle_arrays import settle_arrays  # noqa: E402

Q = queries("postgresql")
NAMES = re.compile(r"%\((\w+)\)s")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.settle_plan")
    parser.add_argument("--jobs", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=32, help="runs per claim and settle")
    parser.add_argument("--drain", type=float, default=0.9, help="share drained before EXPLAIN")
    return parser.parse_args()


def fill(conn: psycopg.Connection, jobs: int) -> None:
    conn.execute("DELETE FROM django_ultjobs_jobattempt")
    conn.execute("DELETE FROM django_ultjobs_job")
    conn.execute("VACUUM (ANALYZE) django_ultjobs_jobattempt")
    insert_queued_noops(conn, jobs)
    conn.execute("VACUUM (ANALYZE) django_ultjobs_job")


def claim(conn: psycopg.Connection, limit: int) -> tuple[uuid.UUID, list[Any]]:
    token = uuid.uuid4()
    rows = conn.execute(claim_text(Q["claim"], limit, kinds=0),
                        {"queues": ["default"], "limit": limit, "token": token,
                         "worker_id": "w1", "timeout": 60.0, "now": None},
                        prepare=False).fetchall()
    return token, rows


def settle_params(token: uuid.UUID, rows: list[Any]) -> dict[str, Any]:
    """A batch of successes as the store sends it (``PostgresStore.settle_params``), but with
    no run's attempt on its job's row (rule 97 (attempt-on-row)), so each records an attempt row, as
    a success after a retry does: the attempts table grows by a row per run, which is what the
    generic plan made at the first settles must survive."""
    batch = [Settlement(job_id=r[0], token=str(token), status="succeeded", attempt_no=r[6],
                        started_at=r[12], outcome="succeeded", result_json="null") for r in rows]
    return {**settle_arrays(batch, datetime.isoformat), "on_row": None, "worker_id": "w1",
            "now": None}


def explain_prepared(conn: psycopg.Connection, modes: dict[str, dict[str, Any]]
                     ) -> dict[str, list[str]]:
    """EXPLAIN (ANALYZE, BUFFERS) of the connection's prepared settle under each plan cache mode,
    with its own batch, all in one transaction rolled back (psycopg forgets its prepared
    statements at a rollback)."""
    text = Q["settle"]
    order = list(dict.fromkeys(NAMES.findall(text)))
    dollar = NAMES.sub(lambda m: f"${order.index(m[1]) + 1}", text)
    (name,) = conn.execute("SELECT name FROM pg_prepared_statements WHERE statement = %s",
                           [dollar], prepare=False).fetchone()
    plans = {}
    with conn.transaction(force_rollback=True):
        for mode, params in modes.items():
            conn.execute(f"SET LOCAL plan_cache_mode = {mode}", prepare=False)
            statement = sql.SQL("EXPLAIN (ANALYZE, BUFFERS) EXECUTE {}({})").format(
                sql.Identifier(name), sql.SQL(", ").join(sql.Literal(params[p]) for p in order))
            plans[mode] = [r[0] for r in conn.execute(statement.as_string(conn), prepare=False)]
    return plans


def main() -> None:
    args = parse_args()
    call_command("migrate", database="postgres", verbosity=0)
    params = connections["postgres"].get_connection_params()
    for option in ("cursor_factory", "prepare_threshold", "context"):
        params.pop(option, None)
    with psycopg.connect(**params, autocommit=True) as conn:
        fill(conn, args.jobs)
    with psycopg.connect(**params, autocommit=True, prepare_threshold=5) as conn:
        times: list[float] = []
        while len(times) * args.batch < args.jobs * args.drain:
            token, rows = claim(conn, args.batch)
            started = time.perf_counter()
            conn.execute(Q["settle"], settle_params(token, rows)).fetchall()
            times.append(time.perf_counter() - started)
        tenth = len(times) // 10
        print(f"{len(times)} settles of {args.batch} runs on one connection (prepare_threshold "
              "5), median ms per tenth of the drain: "
              + ", ".join(f"{statistics.median(times[i * tenth:(i + 1) * tenth]) * 1e3:.2f}"
                          for i in range(10)))
        modes = ("force_generic_plan", "force_custom_plan")
        plans = explain_prepared(conn, {mode: settle_params(*claim(conn, args.batch))
                                        for mode in modes})
        for mode in modes:
            print(f"\n--- the prepared settle, plan_cache_mode = {mode}:")
            print("\n".join(plans[mode]))

if __name__ == "__main__":
    main()
