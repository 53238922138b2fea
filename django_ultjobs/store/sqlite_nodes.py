"""SQLite: a workflow's jobs inserted with their graph columns already on each row
(rule 152 (graph-insert-same-rows), docs/architecture.md).

Elsewhere a graph's jobs are inserted, then linked (``nodes_link``): the edges name ids the
insert assigns. Here the ids are chosen first, so every row goes in once, whole: the same
columns the two statements write, without a second write of each row and of the claim indexes
it enters and leaves. The caller's transaction has written already (the workflow's row), so it
holds SQLite's one write lock: no other connection can insert between the read of the last id
and the inserts.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from ..core import jsonargs
from .base import JobStore
from .records import GraphRow, GraphRowsOf, NewJob, ids_text

#: Rows per INSERT: one statement writes its rows and the table's sequence once, where a
#: statement per row paid both per row; a few hundred rows amortise it.
ROWS_PER_STATEMENT = 250


def insert(store: JobStore, jobs: Sequence[NewJob], graph_rows_of: GraphRowsOf) -> list[int]:
    """Insert ``jobs`` as ``graph_rows_of(ids)``, on the caller's cursor and in its
    transaction (one that has written already); return their ids, in the order of ``jobs``."""
    if not store.connection.in_atomic_block:
        raise RuntimeError("sqlite_nodes.insert runs inside the transaction that wrote the "
                           "workflow's row")
    with store.cursor() as cur:
        cur.execute(store.sql["nodes_last_id"], {"now": store.now_param()})
        last, clock = cur.fetchone()
        ids = list(range(last + 1, last + 1 + len(jobs)))
        rows = list(_rows(store, jobs, graph_rows_of(ids), clock))
        per = _rows_per_statement(store, len(rows[0]))
        for start in range(0, len(rows), per):
            chunk = rows[start:start + per]
            cur.execute(_statement(store.sql["nodes_insert"], len(chunk)),
                        [value for row in chunk for value in row])
    return ids


def _rows_per_statement(store: JobStore, params_per_row: int) -> int:
    """How many rows one INSERT takes: up to ``ROWS_PER_STATEMENT``, and never more
    parameters than this SQLite takes in one statement (a build may allow as few as 999)."""
    limit = store.connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    return max(1, min(ROWS_PER_STATEMENT, limit // params_per_row))


@functools.lru_cache(maxsize=8)
def _statement(sql: str, rows: int) -> str:
    """``nodes_insert`` with its one VALUES row written ``rows`` times, each ``?`` as the ``%s``
    Django's cursor takes for a positional parameter (its SQLite wrapper writes ``?`` back)."""
    head, values, row = sql.partition("VALUES ")
    return head + values + ",\n".join([row.replace("?", "%s")] * rows)


def _rows(store: JobStore, jobs: Sequence[NewJob], graph_rows: Sequence[GraphRow],
          clock: str) -> Iterator[tuple[Any, ...]]:
    """Each job's parameters, in ``nodes_insert``'s order: the enqueue statement's values, and
    the graph columns as ``nodes_link`` writes them."""
    for job, p in zip(jobs, graph_rows, strict=True):
        # The store's own text of a run_at (SQLite's rounds it up to the clock's millisecond).
        run_at = None if job.run_at is None else store.new_job_row(job)["run_at"]
        yield (p.job_id, job.name, job.queue, job.priority, _json(job.args), _json(job.kwargs),
               "pending" if p.pending else "queued", job.max_attempts, run_at, clock,
               float(job.delay), job.traceparent, job.tracestate, job.enqueued_by, clock, clock,
               job.concurrency_key, job.timeout, job.expires_in, clock, job.expires_in,
               _json(list(job.tags)), p.total, p.when, p.has_dependents, p.workflow_id,
               p.batch_id, p.callback_of, ids_text(p.depends_on), ids_text(p.dependents),
               _wait_key(p))


def _json(value: Any) -> str:
    """A checked JSON value as the enqueue statement stores it; empty ones without the encoder
    (most calls of a graph have no keyword arguments, nearly all no tags)."""
    if not value:
        return "[]" if isinstance(value, list) else "{}"
    return jsonargs.dumps(value)


def _wait_key(p: GraphRow) -> str | None:
    """What the job's finish notifies (rule 116 (wait-for-result)), as ``nodes_link`` writes it."""
    group = p.batch_id if p.batch_id is not None else p.callback_of
    if group is not None:
        return f"b{group}"
    return None if p.workflow_id is None else f"w{p.workflow_id}"
