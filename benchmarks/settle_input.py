"""What the settle's batch costs to send and to read, by the form it takes.

    BENCH_PG_NAME=ultjobs_bench_x python -m benchmarks.settle_input [--rows 128] [--calls 300]
                                                                     [--rounds 3]

The same plain successes are read three ways by a statement that does nothing else (a count and
a sum), prepared: as one JSON batch, the form the settle sent before its arrays
(``_settlement_row``, ``jsonb_to_recordset``); as the arrays the settle sends now
(``PostgresStore.settle_params``, unnested as the settle does); as arrays of the same columns
dumped by psycopg in binary. Each is timed on both sides, per row: the server's CPU from its
backend's ``/proc/<pid>/schedstat``, and the calling thread's CPU (``time.thread_time``) to build
the parameters and send them. The forms alternate within each round. Linux only.
"""

from __future__ import annotations

import argparse
import os
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
os.environ["BENCH_ALIAS"] = "postgres"

import django

django.setup()

from django.db import connection  # noqa: E402

from django_ultjobs.store import get_store, settle_arrays  # noqa: E402
from django_ultjobs.store.base import dumps_batch  # noqa: E402
from django_ultjobs.store.records import Settlement  # noqa: E402

STORE = get_store()
READ = "SELECT count(*), sum(c.attempt_no) FROM {source}"
#: The batch's columns as the settle read them from JSON before its arrays.
JSON_QUERY = READ.format(source="""jsonb_to_recordset(%(batch)s::jsonb) AS c(
    id bigint, token uuid, status text, attempt_delta int, delay float8, error text,
    result_json text, outcome text, attempt_no int, started_at timestamptz, slot_key text,
    slot int, wait_event text, wait_match jsonb, wait_after bigint, steps_run jsonb,
    steps_replayed jsonb, extends bigint, on_row boolean)""")
#: The settle's own unnest of its arrays.
ARRAYS_QUERY = READ.format(source=re.search(r"unnest\(.*?\) AS c\(.*?\)",
                                            STORE.sql["settle"], re.DOTALL)[0])
BINARY_QUERY = ARRAYS_QUERY.replace(")s::", ")b::")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.settle_input")
    parser.add_argument("--rows", type=int, default=128, help="runs per settle batch")
    parser.add_argument("--calls", type=int, default=300, help="statements per form and round")
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args()


def settlements(rows: int) -> list[Settlement]:
    started = datetime.now(UTC)
    return [Settlement(job_id=1_000_000 + i, token=str(uuid.uuid4()), status="succeeded",
                       attempt_no=1, started_at=started, outcome="succeeded",
                       result_json="null") for i in range(rows)]


def as_json(batch: list[Settlement]) -> dict[str, Any]:
    return {"batch": dumps_batch([STORE._settlement_row(s) for s in batch])}


def as_arrays(batch: list[Settlement]) -> dict[str, Any]:
    return STORE.settle_params(batch, "w1")


def as_binary(batch: list[Settlement]) -> dict[str, Any]:
    # The columns a plain success uses as typed lists; the others NULL.
    return {**dict.fromkeys(settle_arrays.settle_arrays(batch, datetime.isoformat)),
            "id": [s.job_id for s in batch], "token": [uuid.UUID(s.token) for s in batch],
            "status": [s.status for s in batch], "attempt_delta": [s.attempt_delta for s in batch],
            "delay": [s.delay for s in batch], "result_json": [s.result_json for s in batch],
            "outcome": [s.outcome for s in batch], "attempt_no": [s.attempt_no for s in batch],
            "started_at": [s.started_at for s in batch], "on_row": [s.on_row for s in batch]}


def backend_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def measure(cur: Any, pid: int, query: str, build: Callable[[list[Settlement]], Any],
            batch: list[Settlement], calls: int) -> tuple[float, float]:
    """Server and client CPU per row, µs, of ``calls`` statements after 20 to prepare."""
    for _ in range(20):
        cur.execute(query, build(batch), prepare=True)
    server, client = backend_ns(pid), time.thread_time()
    for _ in range(calls):
        cur.execute(query, build(batch), prepare=True)
    per_row = calls * len(batch)
    return ((backend_ns(pid) - server) / 1000 / per_row,
            (time.thread_time() - client) * 1e6 / per_row)


def main() -> None:
    args = parse_args()
    batch = settlements(args.rows)
    forms = [("JSON, as sent before", JSON_QUERY, as_json),
             ("arrays, as sent now", ARRAYS_QUERY, as_arrays),
             ("arrays, psycopg binary", BINARY_QUERY, as_binary)]
    connection.ensure_connection()
    raw = connection.connection
    raw.autocommit = True
    with raw.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
        print(f"{args.rows} plain successes a statement, {args.calls} statements a form a round; "
              "µs per row: server CPU / client CPU")
        for r in range(args.rounds):
            for label, query, build in forms:
                server, client = measure(cur, pid, query, build, batch, args.calls)
                print(f"round {r + 1}  {label:<24} {server:5.2f} / {client:5.2f}")


if __name__ == "__main__":
    main()
