"""The body a worker runs for a ``django.tasks`` task: Django's run protocol around the call.

``UltJobsBackend.job_spec`` registers a ``TaskRunner`` as the job's function, so the worker runs
a task exactly as it runs any job (heartbeat, slots, retries, tracing), and the runner does
what Django's own backends do around a run: build the RUNNING ``TaskResult``, send
``task_started``, call the function (with a ``TaskContext`` when it takes one; ``task.call`` runs
an async function to completion), then send ``task_finished`` once the task has finished.
"""

from __future__ import annotations

import traceback
from typing import Any

from django.utils import timezone

from .. import jsonargs
from ..conf import jobs_database
from ..context import JobContext
from ..exceptions import JobSlotLostError, LeaseLostError, WorkerShutdownError
from ..models import Job
from ..steps import Suspend
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

#: Cancellations after which the job goes back to the queue: the task has not finished.
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
        backend = task.get_backend()
        sender = type(backend)
        result = _running_result(task, ctx, list(args), dict(kwargs))
        task_started_signal.send(sender=sender, task_result=result)
        try:
            if task.takes_context:
                context = UltJobsTaskContext(task_result=result, job=ctx)
                raw = task.call(context, *args, **kwargs)
            else:
                raw = task.call(*args, **kwargs)
            value = normalize_json(raw)
            # The worker refuses what JSON would change ({1: ...} keys): fail it here, inside
            # the run, so task_finished says FAILED rather than SUCCESSFUL and then a failure.
            jsonargs.check_result(task.module_path, value)
        except Suspend:
            # A durable wait (context.job.sleep / wait_for_event): the task resumes later.
            raise
        except BaseException as exc:
            if _ends_task(ctx):
                object.__setattr__(result, "finished_at", timezone.now())
                result.errors.append(TaskError(
                    exception_class_path=_path(type(exc)),
                    traceback="".join(traceback.format_exception(exc)),
                ))
                object.__setattr__(result, "status", TaskResultStatus.FAILED)
                # Sent inside the handler, as Django's backends do: receivers (Django's own
                # logger among them) read the exception from sys.exc_info().
                task_finished_signal.send(sender=sender, task_result=result)
            raise
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


def _ends_task(ctx: JobContext) -> bool:
    """Whether the exception ending this run makes the task FAILED (no retry, no hand-back).

    Mirrors the worker's executor: a run cancelled by a lost slot, a lost lease or a shutdown
    goes back to the queue; a cancel request ends the task; any other exception is retried
    while attempts remain.
    """
    reason = ctx.cancel_reason
    if reason is not None:
        return not isinstance(reason, _HANDED_BACK)
    return ctx.attempt >= ctx.max_attempts


def _path(cls: type[BaseException]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
