"""Tasks the django.tasks suite enqueues, written as a user of ``django.tasks`` writes them.

Their backend is TASKS["default"] (UltJobsBackend); the contract suite moves them to Django's
ImmediateBackend with ``.using(backend="immediate")``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from django_ultjobs.tasks_backend.compat import Task, TaskContext, task


class TaskBoom(Exception):
    """A task's own exception: its class path must survive the round trip through the rows."""


@task
def add(a: int, b: int) -> int:
    return a + b


@task(max_attempts=1)
def fail(message: str) -> None:
    raise TaskBoom(message)


@task(max_attempts=1)
def fail_builtin() -> None:
    raise ValueError("a builtin error")


@task(max_attempts=1)
def fail_chained() -> None:
    try:
        {}["missing"]
    except KeyError as exc:
        raise TaskBoom("raised while handling a KeyError") from exc


@task
def returns_tuple() -> tuple[int, int]:
    return (1, 2)


@task(max_attempts=1)
def returns_set() -> set[int]:
    return {1}


@task(takes_context=True)
def context_info(context: TaskContext, x: int) -> dict[str, Any]:
    job = getattr(context, "job", None)
    return {
        "is_task_context": isinstance(context, TaskContext),
        "attempt": context.attempt,
        "id": context.task_result.id,
        "status": str(context.task_result.status),
        "worker_ids": list(context.task_result.worker_ids),
        "x": x,
        "job_id": None if job is None else job.job_id,
    }


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task(queue_name="emails", priority=10)
def email(to: str) -> str:
    return f"sent to {to}"


@task(takes_context=True, max_attempts=3, backoff=0.0)
def flaky(context: TaskContext, fail_times: int) -> int:
    if context.attempt <= fail_times:
        raise TaskBoom(f"failure on attempt {context.attempt}")
    return context.attempt


@task(concurrency=2, max_attempts=5, backoff=0.5, max_backoff=10.0)
def capped() -> None:
    return None


class Overlap:
    """How many runs of ``one_at_a_time`` were in flight at once (worker threads share it)."""

    lock = threading.Lock()
    running = 0
    peak = 0


@task(concurrency=1, max_attempts=1)
def one_at_a_time(seconds: float) -> None:
    with Overlap.lock:
        Overlap.running += 1
        Overlap.peak = max(Overlap.peak, Overlap.running)
    time.sleep(seconds)
    with Overlap.lock:
        Overlap.running -= 1


class Calls:
    """How often ``stepped``'s step function really ran."""

    count = 0

    @classmethod
    def bump(cls) -> int:
        cls.count += 1
        return cls.count


@task(takes_context=True, max_attempts=2, backoff=0.0)
def stepped(context: Any) -> int:
    """A durable step through ``context.job``: a retry replays it instead of running it."""
    value = context.job.step("bump", Calls.bump)
    if context.attempt == 1:
        raise TaskBoom("failing after the step")
    return value


@task(backend="immediate")
def on_immediate(x: int) -> int:
    """Defined for Django's ImmediateBackend: moving it onto UltJobsBackend is refused."""
    return x


def doubled(x: int) -> int:
    return 2 * x


# A plain django.tasks Task, as Django 6.0's @task builds one (it has no backend task_class):
# validated, and so registered, by UltJobsBackend when the module is imported.
doubled = Task(func=doubled)  # type: ignore[assignment]


def no_context_param(x: int) -> int:
    """A plain function: defining it as takes_context=True is invalid (no 'context' first)."""
    return x


def plain_function(x: int) -> int:
    """A plain function: tests turn it into a Task of their own."""
    return x


@task(unique=True, max_attempts=1)
def refresh(user_id: int, full: bool = False) -> int:
    """A unique task: one run per (user_id, full) while one is queued, running or waiting."""
    return user_id


@task(takes_context=True, timeout=0.3, max_attempts=1)
def overstays(context: TaskContext, seconds: float) -> None:
    """Loops (cooperatively) for ``seconds``, past its 0.3 s timeout (rule 55 (timeout-cancels))."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        context.job.raise_if_cancelled()
        time.sleep(0.01)


@task(retry_on=(ConnectionError,), max_attempts=3, backoff=0.0)
def retried_on_connection(kind: str) -> None:
    """Retried only on ConnectionError (rule 57 (retry-on-only))."""
    if kind == "connection":
        raise ConnectionError("no answer")
    raise ValueError("a bug")


@task
async def async_where(fail: bool = False) -> str:
    """The thread an async task's body runs on: the worker's event loop's
    (rule 85 (one-event-loop))."""
    await asyncio.sleep(0)
    if fail:
        raise TaskBoom("an async task's own failure")
    return threading.current_thread().name
