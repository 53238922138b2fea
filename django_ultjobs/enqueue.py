"""The enqueue path: checked calls become rows, one at a time or many in one statement."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING, Any

from .metrics import record_enqueued
from .models import Job, JobStatus
from .store import EnqueuedJob, NewJob, get_store
from .tracing import capture_trace_context, current_actor

if TYPE_CHECKING:
    from .job_spec import JobCall


def _new_job(job_call: JobCall, traceparent: str, tracestate: str, actor: str) -> NewJob:
    spec = job_call.spec
    return NewJob(
        name=spec.name,
        queue=spec.queue,
        priority=spec.priority,
        args=list(job_call.args),
        kwargs=dict(job_call.kwargs),
        max_attempts=spec.max_attempts,
        delay=spec.delay,
        run_at=spec.run_at,
        traceparent=traceparent,
        tracestate=tracestate,
        enqueued_by=actor,
        concurrency_key=spec.slot_key_of(job_call.args, job_call.kwargs),
    )


def _as_loaded(new: NewJob, row: EnqueuedJob, alias: str) -> Job:
    """The row just inserted, as a query would have loaded it (what the enqueue statement wrote
    and returned, every other column at its default).

    Built the way a query builds rows (``from_db``, positional), a third of the cost of the
    keyword ``Job(...)`` (performance.md item 28).
    """
    values = {
        **_column_defaults(),
        "id": row.id, "name": new.name, "queue": new.queue, "priority": new.priority,
        "args": new.args, "kwargs": new.kwargs, "status": JobStatus.QUEUED, "attempt": 0,
        "max_attempts": new.max_attempts, "visible_at": row.visible_at,
        "traceparent": new.traceparent, "tracestate": new.tracestate,
        "enqueued_by": new.enqueued_by, "concurrency_key": new.concurrency_key,
        "created_at": row.created_at,
        "updated_at": row.created_at,
    }
    return Job.from_db(alias, None, [values[f.attname] for f in Job._meta.concrete_fields])


@cache
def _column_defaults() -> dict[str, Any]:
    """The model's default of every column the enqueue statement leaves at its default.

    Shared by every returned row, so only plain defaults (None, text, numbers, booleans); a
    callable default makes a fresh value per row and its column is always written above."""
    return {f.attname: f.get_default() for f in Job._meta.concrete_fields
            if not f.has_db_default() and not (f.has_default() and callable(f.default))}


def bulk_enqueue(calls: Iterable[JobCall]) -> list[int]:
    """Queue many calls (of any jobs) in ONE statement, in the caller's transaction.

    Returns the new ids in the order of ``calls``. Every call is checked before anything is
    written, so one bad argument writes no row at all.
    """
    calls = list(calls)
    if not calls:
        return []
    trace = capture_trace_context()
    actor = current_actor()
    store = get_store()
    rows = store.enqueue([_new_job(c, *trace, actor) for c in calls])
    record_enqueued(((c.spec.name, c.spec.queue) for c in calls), store.alias)
    return [row.id for row in rows]


def enqueue_one(job_call: JobCall) -> Job:
    """Queue one checked call inside the caller's transaction; return its row."""
    new = _new_job(job_call, *capture_trace_context(), current_actor())
    store = get_store()
    (row,) = store.enqueue([new])
    record_enqueued(((new.name, new.queue),), store.alias)
    return _as_loaded(new, row, store.alias)
