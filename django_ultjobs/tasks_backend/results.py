"""Build ``TaskResult``s from job rows: the status mapping, attempts, errors and timestamps.

Reads only (the ORM, on the jobs database); no SQL of the hot path lives here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from ..exceptions import (
    CancelRequestedError,
    JobExpiredError,
    JobTimeoutError,
    LeaseLostError,
    UltJobsError,
)
from .compat import Task, TaskError, TaskResult, TaskResultStatus

if TYPE_CHECKING:
    from ..models import Job

#: Our statuses as Django's. A waiting job (a durable sleep or event wait) is mid-run to the
#: caller; a cancelled one is FAILED, with the cancellation as its last error, because Django
#: has no cancelled status and a cancelled task did not succeed.
STATUS_MAP: dict[str, TaskResultStatus] = {
    "queued": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "waiting": TaskResultStatus.RUNNING,
    # Waits for its dependencies (docs/workflows.md): not started, as a queued one.
    "pending": TaskResultStatus.READY,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}

#: Attempt outcomes that are errors of the task. Not: slot_lost, interrupted and suspended,
#: which hand the job back without burning the attempt (nothing failed).
ERROR_OUTCOMES = frozenset({"retrying", "failed", "cancelled", "lease_lost", "timed_out",
                            "non_retryable", "not_retried"})


class Attempt(NamedTuple):
    """The part of an attempt (``AttemptRecord``) a TaskResult shows."""

    attempt: int
    worker_id: str
    started_at: datetime | None
    outcome: str
    error: str


@dataclass(frozen=True)
class History:
    """What a job's attempts say in Django's terms."""

    worker_ids: list[str]
    errors: list[TaskError]
    started_at: datetime | None
    last_attempted_at: datetime | None


def load_attempts(alias: str, job_id: int) -> list[Attempt]:
    """Return a job's attempts, oldest first (the one its row holds too;
    rule 97 (attempt-on-row))."""
    from ..store.attempts import history as attempt_history

    rows = attempt_history(job_id, using=alias).values_list(
        "attempt", "worker_id", "started_at", "outcome", "error")
    return [Attempt(*row) for row in rows]


def history(attempts: list[Attempt], counted: int, current: Attempt | None = None) -> History:
    """Summarise the first ``counted`` attempts (plus ``current``, a run still in flight).

    One worker id per attempt, as Django counts ``TaskResult.attempts = len(worker_ids)``. A
    hand-back (slot lost, drain, deploy skew) keeps its attempt number, so the run that
    follows it replaces its row here: the later row of a number is the one that counts.
    """
    chosen: dict[int, Attempt] = {}
    for row in attempts:
        if 1 <= row.attempt <= counted:
            chosen[row.attempt] = row
    if current is not None:
        chosen[current.attempt] = current
    ordered = [chosen[n] for n in sorted(chosen)]
    starts = [row.started_at for row in ordered if row.started_at is not None]
    return History(
        worker_ids=[row.worker_id for row in ordered],
        errors=[task_error(row.outcome, row.error) for row in attempts
                if row.attempt <= counted and row.outcome in ERROR_OUTCOMES],
        started_at=min(starts) if starts else None,
        last_attempted_at=ordered[-1].started_at if ordered else None,
    )


def from_job(job: Job, attempts: list[Attempt], *, task: Task, backend: str) -> TaskResult:
    """Return the TaskResult of ``job`` as ``task``, on the TASKS alias ``backend``."""
    current = None
    if job.status == "running":
        # The attempt in flight has no row until it settles.
        current = Attempt(job.attempt, job.worker_id, job.claimed_at, "", "")
    done = history(attempts, job.attempt, current)
    errors = list(done.errors)
    if job.status == "cancelled" and any(r.outcome == "expired" for r in attempts):
        # Expired before it started (rule 58 (expired-never-runs)): never run, so no attempt
        # counted, and the error says so by its class.
        errors.append(TaskError(exception_class_path=_path(JobExpiredError),
                                traceback=job.last_error or "expired before it ran"))
    elif job.status == "cancelled" and not any(r.outcome == "cancelled" for r in attempts):
        # Cancelled while queued: no run, so no attempt row to show it.
        errors.append(TaskError(exception_class_path=_path(CancelRequestedError),
                                traceback=job.last_error or "cancelled before it ran"))
    elif job.status == "failed" and not errors:
        errors.append(task_error("failed", job.last_error))
    status = STATUS_MAP[job.status]
    result = TaskResult(
        task=task,
        id=str(job.id),
        status=status,
        enqueued_at=job.created_at,
        started_at=done.started_at,
        finished_at=job.finished_at if status in _FINISHED else None,
        last_attempted_at=done.last_attempted_at,
        args=job.args,
        kwargs=job.kwargs,
        backend=backend,
        errors=errors,
        worker_ids=done.worker_ids,
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)
    return result


_FINISHED = frozenset({TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED})


def task_error(outcome: str, error: str) -> TaskError:
    """Return Django's ``TaskError`` for an attempt that ended with ``outcome`` and ``error``.

    ``error`` is the traceback the worker kept; the exception's class is read back from it. The
    outcomes whose error is a message rather than a traceback name their own cause.
    """
    path = exception_class_path(error)
    if path is None:
        path = _path({"cancelled": CancelRequestedError, "lease_lost": LeaseLostError,
                      "timed_out": JobTimeoutError}.get(outcome, UltJobsError))
    return TaskError(exception_class_path=path, traceback=error)


_HEADER = "Traceback (most recent call last):"
_GROUP_HEADER = "  + Exception Group Traceback (most recent call last):"
_TYPE = re.compile(r"([A-Za-z_][\w.]*)(?::|$)")


def exception_class_path(text: str) -> str | None:
    """Return the dotted class of the exception a formatted traceback ends with, or None.

    ``traceback.format_exception`` writes the raised exception as the first unindented line
    after the last traceback header (a chain lists its causes first), as ``module.Qualname:
    message`` or bare ``Name: message`` for builtins; notes follow it. An exception group's
    own lines carry a ``"  | "`` prefix under its own header.
    """
    lines = text.splitlines()
    plain = max((i for i, line in enumerate(lines) if line == _HEADER), default=-1)
    group = max((i for i, line in enumerate(lines) if line == _GROUP_HEADER), default=-1)
    if group > plain:
        body = [line[4:] for line in lines[group + 1:] if line.startswith("  | ")]
    else:
        body = lines[plain + 1:]
    for line in body:
        if line and not line[0].isspace():
            match = _TYPE.match(line)
            if match is None:
                return None
            name = match[1]
            return name if "." in name else f"builtins.{name}"
    return None


def _path(cls: type[BaseException]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"

