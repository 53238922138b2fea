"""The enqueue path: checked calls become rows, one at a time or many in one statement."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Any, Protocol

from ..exceptions import UniqueKeyContendedError
from ..models import Job, JobStatus
from ..observability.metrics import record_enqueued
from ..observability.tracing import capture_trace_context, current_actor
from ..store import EnqueuedJob, JobStore, NewJob, get_store
from ..store.dependencies import enqueue_graph
from ..store.records import GraphRowsOf
from . import unique


class CheckedCall(Protocol):
    """A call of a job, checked and ready to queue (``JobCall`` is one).

    It makes the record of its own row, so this module needs nothing of the spec, which
    imports it."""

    def new_job(self, traceparent: str, tracestate: str, actor: str) -> NewJob:
        """The row this call becomes, as the store inserts it."""
        ...


#: The ids of the jobs enqueued while a ``Batch`` block is open in this context: its members.
#: None outside a block (and while a block enqueues what is not a member).
_members: ContextVar[list[int] | None] = ContextVar("ultjobs_batch_members", default=None)


@contextmanager
def members_into(ids: list[int] | None) -> Iterator[None]:
    """Append the id of every job this context enqueues (and creates) to ``ids`` until the block
    ends; None: enqueue what follows as no batch's member."""
    token = _members.set(ids)
    try:
        yield
    finally:
        _members.reset(token)


def collecting() -> bool:
    """Whether a ``Batch`` block collects this context's enqueues."""
    return _members.get() is not None


def _collect(ids: Iterable[int]) -> None:
    members = _members.get()
    if members is not None:
        members.extend(ids)


def _as_loaded(new: NewJob, row: EnqueuedJob, alias: str) -> Job:
    """The row just inserted, as a query would have loaded it (what the enqueue statement wrote
    and returned, every other column at its default).

    Built the way a query builds rows (``from_db``, positional), which costs far less than
    the keyword ``Job(...)`` that runs every field's descriptor.
    """
    values = {
        **_column_defaults(),
        "id": row.id, "name": new.name, "queue": new.queue, "priority": new.priority,
        "args": new.args, "kwargs": new.kwargs, "status": JobStatus.QUEUED, "attempt": 0,
        "max_attempts": new.max_attempts, "visible_at": row.visible_at,
        "traceparent": new.traceparent, "tracestate": new.tracestate,
        "enqueued_by": new.enqueued_by, "concurrency_key": new.concurrency_key,
        "created_at": row.created_at, "updated_at": row.created_at,
        "unique_key": new.unique_key, "unique_for": new.unique_for,
        "timeout": new.timeout, "expires_at": row.expires_at, "cancel_reason": "",
        "tags": list(new.tags), "progress": None, "attempt_on_row": False,
        "has_dependents": False, "deps_total": 0, "deps_done": 0, "deps_failed": 0,
        "depends_when": "",
    }
    return Job.from_db(alias, None, [values[f.attname] for f in Job._meta.concrete_fields])


@cache
def _column_defaults() -> dict[str, Any]:
    """The model's default of every column the enqueue statement leaves at its default.

    Shared by every returned row, so only plain defaults (None, text, numbers, booleans); a
    callable default makes a fresh value per row and its column is always written above."""
    return {f.attname: f.get_default() for f in Job._meta.concrete_fields
            if not f.has_db_default() and not (f.has_default() and callable(f.default))}


def bulk_enqueue(calls: Iterable[CheckedCall]) -> list[int]:
    """Queue many calls (of any jobs) in ONE statement, in the caller's transaction.

    Returns the ids in the order of ``calls``. Every call is checked before anything is
    written, so one bad argument writes no row at all. A call whose unique key a job holds (one
    already in the table, or an earlier call of the same batch) writes nothing and gives that
    job's id (rule 68 (bulk-unique-in-order)).
    """
    trace = capture_trace_context()
    actor = current_actor()
    # Each call becomes its record as it comes, and is dropped then: a batch keeps one object
    # alive per job, not two, for the cyclic collector to walk while the batch is built.
    news = [c.new_job(*trace, actor) for c in calls]
    if not news:
        return []
    store = get_store()
    with store.tables_required():
        if all(new.unique_key is None for new in news):
            ids = store.enqueue_ids(news)
            record_enqueued(((new.name, new.queue) for new in news), store.alias)
            _collect(ids)
            return ids
        answered = unique.enqueue_keyed(news, store.enqueue_unique,
                                        unique.holders_of(store.alias), lambda row: row.id)
    _collect(a.id for a in answered if a.created)
    # Only the calls that made a row were enqueued; one answered by its key's holder was not.
    record_enqueued(((new.name, new.queue) for new, a in zip(news, answered, strict=True)
                     if a.created), store.alias)
    return [a.id for a in answered]


def bulk_enqueue_graph(calls: Iterable[CheckedCall], graph_rows_of: GraphRowsOf) -> list[int]:
    """``bulk_enqueue`` of calls that hold no unique key, each job made what
    ``graph_rows_of(ids)`` says (a workflow's node), in the caller's transaction, which has
    written already. Returns the ids in the order of ``calls``."""
    trace = capture_trace_context()
    actor = current_actor()
    news = [c.new_job(*trace, actor) for c in calls]
    store = get_store()
    with store.tables_required():
        ids = enqueue_graph(store, news, graph_rows_of)
    record_enqueued(((new.name, new.queue) for new in news), store.alias)
    _collect(ids)
    return ids


def enqueue_one(job_call: CheckedCall) -> tuple[Job, bool]:
    """Queue one checked call inside the caller's transaction; return its row, and whether it
    is new (False: the job holding the call's unique key, rule 66 (held-key-returns-holder))."""
    new = job_call.new_job(*capture_trace_context(), current_actor())
    store = get_store()
    with store.tables_required():
        if new.unique_key is not None:
            return _enqueue_keyed(store, new)
        (row,) = store.enqueue([new])
    record_enqueued(((new.name, new.queue),), store.alias)
    _collect((row.id,))
    return _as_loaded(new, row, store.alias), True


def _enqueue_keyed(store: JobStore, new: NewJob) -> tuple[Job, bool]:
    """Insert ``new`` unless a job holds its key; else return that job, read in a new statement
    (rule 66 (held-key-returns-holder)). A holder gone before it is read (taken over, pruned) is
    another round."""
    for _ in range(unique.MAX_ROUNDS):
        (row,) = store.enqueue_unique([new])
        if row is not None:
            record_enqueued(((new.name, new.queue),), store.alias)
            _collect((row.id,))
            return _as_loaded(new, row, store.alias), True
        found = list(Job.objects.using(store.alias).raw(
            store.sql["unique_holder"], {"name": new.name, "key": new.unique_key}))
        if found:
            return found[0], False
    raise UniqueKeyContendedError(
        f"enqueue of unique key {new.unique_key!r} of job {new.name!r} found its holder gone "
        f"{unique.MAX_ROUNDS} times in a row")
