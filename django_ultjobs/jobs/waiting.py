"""Waiting for a result: ``job.wait()``, ``batch.wait()``, ``run.wait()`` and their async twins
(rule 116 (wait-for-result)).

On PostgreSQL a wait that finds its jobs unfinished LISTENs on a connection of its own, in
autocommit, for as long as it waits, and wakes on the notify a settle (or a cancel) sends when
its transaction commits; it also looks again every ``RECHECK`` seconds, so a finish written by
hand is seen too (and one whose notify a pooler dropped). On SQLite it polls every
``POLL`` seconds. Neither holds a transaction open while it waits: every look is a statement of
its own, and a wait inside the caller's ``atomic`` block is refused (the jobs it waits for could
not even start before that block commits).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections
from django.db.transaction import TransactionManagementError

from ..models import FINISHED_STATUSES, UNFINISHED_STATUSES, Batch, Job, Workflow
from ..models import waiters as model_waiters
from ..models.workflows import group_waiters

T = TypeVar("T")

#: Seconds between two looks on SQLite.
POLL = 0.05
#: Seconds between two looks on PostgreSQL when no notify came (a safety net, not the path).
RECHECK = 1.0
#: The channel settles notify on (``finished_notify`` in sql/postgresql.sql).
CHANNEL = "django_ultjobs_finished"


def wait_until(alias: str, look: Callable[[], T | None], wakes: Callable[[str], bool],
               timeout: float | None, what: str) -> T:
    """Call ``look`` until it returns something, and return that; raise ``TimeoutError`` once
    ``timeout`` seconds passed. ``wakes`` says whether a notify's payload may concern us."""
    conn = connections[alias]
    if conn.in_atomic_block:
        raise TransactionManagementError(
            f"cannot wait for {what} inside a transaction: it holds the transaction open, and "
            f"a job enqueued in it cannot start before it commits")
    deadline = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
    if conn.vendor != "postgresql":
        return _poll(look, deadline, what)
    # Finished already: no connection of its own to open. Else one, looked at again once it
    # listens (a notify sent before its LISTEN reaches no one).
    found = look()
    if found is not None:
        return found
    # The driver's own connection, never one of Django's pool (OPTIONS["pool"]): closed below,
    # a pooled one would never go back, and a few waits would empty the pool.
    listener = conn.Database.connect(**conn.get_connection_params(), autocommit=True)
    try:
        listener.execute(f"LISTEN {CHANNEL}")
        while True:
            found = look()
            if found is not None:
                return found
            _await_note(listener, wakes, min(_left(deadline, what), RECHECK))
    finally:
        listener.close()


def _await_note(listener: Any, wakes: Callable[[str], bool], seconds: float) -> None:
    """Return once a notify that ``wakes`` us arrives, or ``seconds`` passed."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        for note in listener.notifies(timeout=left, stop_after=1):
            if wakes(note.payload):
                return


def _poll(look: Callable[[], T | None], deadline: float | None, what: str) -> T:
    while True:
        found = look()
        if found is not None:
            return found
        time.sleep(min(POLL, _left(deadline, what)))


def _left(deadline: float | None, what: str) -> float:
    """Seconds left before ``deadline``; raises ``TimeoutError`` when none are."""
    if deadline is None:
        return RECHECK
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"{what} did not finish in time")
    return left


def wait_job(job: Job, timeout: float | None = None) -> Job:
    """Block until ``job`` finished for good (succeeded, failed with no retry left, or
    cancelled); return its row read afresh. A run that will be retried is not finished."""
    alias = job._state.db or "default"
    rows = Job.objects.using(alias).filter(pk=job.pk)
    key = rows.values_list("wait_key", flat=True).first()
    if key is None and connections[alias].vendor == "postgresql" \
            and not connections[alias].in_atomic_block:
        # Marked before the first look: a settle after it notifies; one before it was seen.
        rows.filter(wait_key__isnull=True).update(wait_key=f"j{job.pk}")
        key = rows.values_list("wait_key", flat=True).first()

    def look() -> Job | None:
        found = rows.filter(status__in=FINISHED_STATUSES).first()
        if found is None and not rows.exists():
            raise Job.DoesNotExist(f"job {job.pk} does not exist")
        return found

    return wait_until(alias, look, lambda payload: payload == key, timeout,
                      f"job {job.pk}")


async def wait_job_async(job: Job, timeout: float | None = None) -> Job:
    """``wait_job`` for async code: the wait runs on a thread of its own (never the one the
    async ORM shares), whose connections are closed when it ends."""
    return await sync_to_async(_closing(wait_job), thread_sensitive=False)(job, timeout)


def _closing(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn``, closing the calling thread's connections when it returns
    (rule 13 (nothing-leaks))."""
    def run(*args: Any) -> T:
        try:
            return fn(*args)
        finally:
            connections.close_all()
    return run


def run_closing(fn: Callable[..., T]) -> Callable[..., Any]:
    """``fn`` as an awaitable, on a thread whose connections are closed when it ends."""
    return sync_to_async(_closing(fn), thread_sensitive=False)


def batch_finished(alias: str, batch_id: int) -> bool:
    """Whether every member and every callback of batch ``batch_id`` finished for good."""
    jobs = Job.objects.using(alias).filter(status__in=UNFINISHED_STATUSES)
    return not jobs.filter(batch_id=batch_id).exists() and \
        not jobs.filter(callback_of_id=batch_id).exists()


def wait_batch(row: Batch, timeout: float | None = None) -> Batch:
    """Block until every member and every callback of the batch ``row`` finished for good;
    return ``row``. Raises ``TimeoutError`` past ``timeout`` seconds."""
    alias = row._state.db or "default"
    token = f"b{row.pk}"
    return wait_until(alias, lambda: row if batch_finished(alias, row.pk) else None,
                      lambda payload: payload == token, timeout, f"batch {row.pk}")


def wait_workflow(row: Workflow, timeout: float | None = None) -> list[Job]:
    """Block until every job of the workflow ``row`` finished for good; return them in the
    order they were added (their ids'). Raises ``TimeoutError`` past ``timeout`` seconds."""
    alias = row._state.db or "default"
    jobs = Job.objects.using(alias).filter(workflow_id=row.pk)
    token = f"w{row.pk}"

    def look() -> list[Job] | None:
        if jobs.filter(status__in=UNFINISHED_STATUSES).exists():
            return None
        return list(jobs.order_by("id"))

    return wait_until(alias, look, lambda payload: payload == token, timeout,
                      f"workflow {row.pk}")


model_waiters.update(wait=wait_job, wait_async=wait_job_async)
group_waiters.update(batch=wait_batch, batch_async=run_closing(wait_batch),
                     workflow=wait_workflow, workflow_async=run_closing(wait_workflow))
