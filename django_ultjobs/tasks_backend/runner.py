"""The body a worker runs for a ``django.tasks`` task: Django's run protocol around the call.

``UltJobsBackend.job_spec`` registers a ``TaskRunner`` as the job's function, so the worker runs
a task exactly as it runs any job (heartbeat, slots, retries, tracing), and the runner does
what Django's own backends do around a run: build the RUNNING ``TaskResult``, send
``task_started``, call the function (with a ``TaskContext`` when it takes one; ``task.call`` runs
an async function to completion), then send ``task_finished`` once the task has finished. An
``async def`` task's runner (``AsyncTaskRunner``) is itself ``async def``: the worker awaits it on
its event loop (rule 85 (one-event-loop)).
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

from django.utils import timezone

from ..conf import jobs_database
from ..core import jsonargs
from ..exceptions import (
    JobSlotLostError,
    JobTimeoutError,
    LeaseLostError,
    WorkerShutdownError,
)
from ..models import Job
from ..runtime.context import JobContext
from ..runtime.steps import Suspend
from ..worker.settlements import not_retried_outcome
from .compat import (
    Task,
    TaskError,
    TaskResult,
    TaskResultStatus,
    normalize_json,
)
from .compat import task_finished as task_finished_signal
from .compat import task_started as task_started_signal
from .results import Attempt, history, load_attempts
from .task_class import UltJobsTaskContext, as_enqueued

#: Cancellations after which the job is handed back: the task has not finished.
_HANDED_BACK = (JobSlotLostError, WorkerShutdownError, LeaseLostError)


class TaskRunner:
    """The job function of one task (``JobSpec.func``, called with the run's ``JobContext``)."""

    def __init__(self, task: Task) -> None:
        self.task = task
        # The registry tells two jobs of one name apart by their function's origin: this
        # runner's is the task function's, so re-registering the same task stays quiet and a
        # different function under the same name is still refused.
        self.__module__ = task.func.__module__
        self.__qualname__ = task.func.__qualname__
        self.__name__ = task.func.__name__

    def __repr__(self) -> str:
        return f"<TaskRunner {self.task.module_path}>"

    def __call__(self, ctx: JobContext, *args: Any, **kwargs: Any) -> Any:
        """Run the task once, sending Django's signals as its own backends do."""
        task = self.task
        sender = type(task.get_backend())
        result = _running_result(task, ctx, list(args), dict(kwargs))
        task_started_signal.send(sender=sender, task_result=result)
        try:
            raw = task.call(*_call_args(task, result, ctx, args), **kwargs)
            value = _checked(task, raw)
        except Suspend:
            # A durable wait (context.job.sleep / wait_for_event): the task resumes later.
            raise
        except BaseException as exc:
            if _ends_task(ctx, getattr(task, "retry_on", None) or (Exception,)):
                _failed(sender, result, exc)
            raise
        return _succeeded(sender, result, value)


class AsyncTaskRunner(TaskRunner):
    """The job function of an ``async def`` task: awaited on the worker's event loop (rule
    85), never run to completion in a loop of its own. What touches the database (the
    running result, Django's signals) runs on a thread: the ORM refuses to run in a loop."""

    async def __call__(self, ctx: JobContext, *args: Any, **kwargs: Any) -> Any:
        """Run the task once, sending Django's signals as its own backends do."""
        from ..worker.async_executor import off_loop

        task = self.task
        sender = type(task.get_backend())
        result = await off_loop(_running_result, task, ctx, list(args), dict(kwargs))
        await off_loop(task_started_signal.send, sender=sender, task_result=result)
        try:
            raw = await task.acall(*_call_args(task, result, ctx, args), **kwargs)
            value = _checked(task, raw)
        except Suspend:
            raise
        except BaseException as exc:
            if _ends_task(ctx, getattr(task, "retry_on", None) or (Exception,)):
                await off_loop(_failed, sender, result, exc)
            raise
        return await off_loop(_succeeded, sender, result, value)


def _call_args(task: Task, result: TaskResult, ctx: JobContext, args: tuple[Any, ...]
               ) -> tuple[Any, ...]:
    """The task's positional arguments, its ``TaskContext`` first when it takes one."""
    if task.takes_context:
        return (UltJobsTaskContext(task_result=result, job=ctx), *args)
    return args


def _checked(task: Task, raw: Any) -> Any:
    """The task's return value as JSON will store it. The worker refuses what JSON would change
    ({1: ...} keys): failed here, inside the run, so task_finished says FAILED rather than
    SUCCESSFUL and then a failure."""
    value = normalize_json(raw)
    jsonargs.check_result(task.module_path, value)
    return value


def _failed(sender: type, result: TaskResult, exc: BaseException) -> None:
    """Mark ``result`` FAILED by ``exc`` and send ``task_finished``."""
    object.__setattr__(result, "finished_at", timezone.now())
    result.errors.append(TaskError(
        exception_class_path=_path(type(exc)),
        traceback="".join(traceback.format_exception(exc)),
    ))
    object.__setattr__(result, "status", TaskResultStatus.FAILED)
    if sys.exception() is exc:
        task_finished_signal.send(sender=sender, task_result=result)
        return
    # Sent inside a handler of exc, as Django's backends do: receivers (Django's own logger
    # among them) read the exception from sys.exc_info(), also on the thread an async task's
    # signals are sent from. Its traceback is left as the body's.
    trace = exc.__traceback__
    try:
        raise exc
    except BaseException:
        task_finished_signal.send(sender=sender, task_result=result)
    finally:
        exc.__traceback__ = trace


def _succeeded(sender: type, result: TaskResult, value: Any) -> Any:
    """Mark ``result`` SUCCESSFUL with ``value``, send ``task_finished``, return ``value``."""
    object.__setattr__(result, "_return_value", value)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    task_finished_signal.send(sender=sender, task_result=result)
    return value


def _running_result(task: Task, ctx: JobContext, args: list[Any], kwargs: dict[str, Any]
                    ) -> TaskResult:
    """Return the TaskResult of the run that is starting, as ``get_result`` would show it."""
    claimed = ctx.ledger.job if ctx.ledger is not None else None
    database = ctx.ledger.store.alias if ctx.ledger is not None else jobs_database()
    started = claimed.claimed_at if claimed is not None else timezone.now()
    enqueued_at = getattr(claimed, "created_at", None)
    if enqueued_at is None:
        enqueued_at = (Job.objects.using(database).filter(pk=ctx.job_id)
                       .values_list("created_at", flat=True).first())
    # Earlier attempts are read only on a retry: a first run has no history to show, and
    # costs no extra query.
    earlier = load_attempts(database, ctx.job_id) if ctx.attempt > 1 else []
    done = history(earlier, ctx.attempt - 1,
                   current=Attempt(ctx.attempt, ctx.worker_id, started, "", ""))
    return TaskResult(
        task=as_enqueued(task, queue=ctx.queue,
                         priority=claimed.priority if claimed is not None else None),
        id=str(ctx.job_id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=enqueued_at,
        started_at=done.started_at,
        finished_at=None,
        last_attempted_at=started,
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=done.errors,
        worker_ids=done.worker_ids,
    )


def _ends_task(ctx: JobContext, retry_on: tuple[type[BaseException], ...]) -> bool:
    """Whether the exception ending this run makes the task FAILED (no retry, no hand-back).

    Mirrors the worker's executor: a run cancelled by a lost slot, a lost lease or a drain
    is handed back; a cancel request, ``NonRetryable`` and an exception outside the
    task's ``retry_on`` end the task; a timeout and any other exception are retried while
    attempts remain.
    """
    reason = ctx.cancellation
    if reason is not None and not isinstance(reason, JobTimeoutError):
        return not isinstance(reason, _HANDED_BACK)
    # The worker's own question of the exception (settlements.retry_or_fail asks it too).
    cause = reason if reason is not None else sys.exception()
    return (not_retried_outcome(retry_on, cause) is not None  # type: ignore[arg-type]
            or ctx.attempt >= ctx.max_attempts)


def _path(cls: type[BaseException]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
