"""The SQL of dependencies (docs/workflows.md, rules 110 (released-in-settle)
to 115 (group-cancel)): writing a graph's or a batch's rows, and
what a job's finish (or a retry taking it back) does to the jobs that wait for it.

Every function runs on the cursor and in the transaction of its caller: the settle that
finished the jobs, the cancel, the retry, the enqueue of the graph. So a dependent is released
or cancelled in the very transaction that settled its last dependency, fenced on that settle's
claim tokens (a stale settle finishes nothing, so it releases nothing).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from . import batch_outcomes, sqlite_nodes
from .base import JobStore
from .records import GraphRow, GraphRowsOf, NewJob, ids_text
from .settle_arrays import numbers, texts

#: The conditions a dependent may wait for (``Workflow.add(when=...)``).
CONDITIONS = ("succeeded", "failed", "finished")
#: Statuses that finish a job for good.
FINAL = frozenset({"succeeded", "failed", "cancelled"})


def write_graph_rows(store: JobStore, cur: Any, graph_rows: Sequence[GraphRow]) -> None:
    """Write ``graph_rows`` on the caller's cursor, in its transaction (the one that enqueued
    the jobs), one statement for them all."""
    if not graph_rows:
        return
    if store.vendor == "postgresql":
        # Array literals written here, as the settle's are (settle_arrays): psycopg's dump of
        # a list, element by element, cost a 10,000-node graph more than its statement.
        cur.execute(store.sql["nodes_link"], {
            "ids": numbers(p.job_id for p in graph_rows),
            "pending": texts("t" if p.pending else "f" for p in graph_rows),
            "totals": numbers(p.total for p in graph_rows),
            "whens": texts(p.when for p in graph_rows),
            "has_dependents": texts("t" if p.has_dependents else "f" for p in graph_rows),
            "workflows": numbers(p.workflow_id for p in graph_rows),
            "batches": numbers(p.batch_id for p in graph_rows),
            "callbacks": numbers(p.callback_of for p in graph_rows),
            "depends_on": texts(ids_text(p.depends_on) for p in graph_rows),
            "dependents": texts(ids_text(p.dependents) for p in graph_rows),
        })
    else:
        cur.execute(store.sql["nodes_link"], {"rows": _json(
            [p.job_id, p.pending, p.total, p.when, p.has_dependents, p.workflow_id, p.batch_id,
             p.callback_of, None if p.depends_on is None else list(p.depends_on),
             None if p.dependents is None else list(p.dependents)] for p in graph_rows)})


def enqueue_graph(store: JobStore, jobs: Sequence[NewJob],
                   graph_rows_of: GraphRowsOf) -> list[int]:
    """Insert ``jobs`` and make each what ``graph_rows_of(ids)`` says, in the caller's
    transaction, which has written already; return their ids, in the order of ``jobs``.

    SQLite writes each row once, whole (``sqlite_nodes``). PostgreSQL inserts them (by COPY
    for many), then places them all in one statement: its ids come from the insert."""
    if store.vendor == "sqlite":
        return sqlite_nodes.insert(store, jobs, graph_rows_of)
    ids = store.enqueue_ids(jobs)
    with store.cursor() as cur:
        write_graph_rows(store, cur, graph_rows_of(ids))
    return ids


def release(store: JobStore, cur: Any, job_ids: Sequence[int]) -> None:
    """Count ``job_ids``, just finished for good in this transaction, on their dependents;
    release or cancel each dependent whose condition now holds or can no longer hold, and go on
    with the dependents that cancels (rules 110 (released-in-settle)
    to 112 (impossible-condition-cancels)). A dependency graph is acyclic (checked
    when it is enqueued), so the cascade ends."""
    ids = list(job_ids)
    while ids:
        ids = _step(store, cur, "release", ids)
    batch_outcomes.count_finished(store, cur, job_ids)


def unfinish(store: JobStore, cur: Any, job_ids: Sequence[int]) -> None:
    """Take back the finish of ``job_ids`` (failed or cancelled jobs a retry just queued again):
    their dependents' counters lose them, and a dependent their finish cancelled comes back to
    pending when its condition can hold again, with its own dependents
    (rule 114 (retry-takes-finish-back))."""
    ids = list(job_ids)
    while ids:
        ids = _step(store, cur, "unfinish", ids)


def _step(store: JobStore, cur: Any, name: str, ids: list[int]) -> list[int]:
    """One level of a release or unfinish; returns the next level's jobs."""
    if store.vendor == "postgresql":
        cur.execute(store.sql[name], {"ids": ids, "now": store.now_param()})
        return [row[0] for row in cur.fetchall() if row[1]]
    # SQLite: judged, then written, inside the one write transaction the caller holds.
    cur.execute(store.sql[f"{name}_judge"], {"ids": json.dumps(ids)})
    judged = cur.fetchall()
    if judged:
        cur.execute(store.sql["dependents_apply"], {
            "rows": _json(list(row[:6]) for row in judged), "now": store.now_param()})
    return [row[0] for row in judged if row[6]]


def notify_finished(store: JobStore, cur: Any, job_ids: Sequence[int]) -> None:
    """Wake the waiters (rule 116 (wait-for-result)) of ``job_ids``, finished outside a settle, on
    commit
    (PostgreSQL; SQLite's waiters poll)."""
    if job_ids and store.vendor == "postgresql":
        cur.execute(store.sql["finished_notify"], {"ids": list(job_ids)})


def _json(rows: Any) -> str:
    return json.dumps(list(rows), separators=(",", ":"))
