"""``UltJobsBackend``: ``django.tasks`` on django_ultjobs' durable queue.

A task is a job named by its module path; ``runjobworker`` runs it with every guarantee a job
has (heartbeat leases, re-delivery after a crash, retries with backoff, fleet-wide concurrency
slots, tracing) and the result is read back from the job's rows.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.core.checks import CheckMessage
from django.utils import timezone
from django.utils.module_loading import import_string

from ..core import jsonargs
from ..core.numeric import shown
from ..exceptions import JobConfigurationError
from ..jobs.options import INT_MAX
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
)
from .task_class import UltJobsTask, as_enqueued

if TYPE_CHECKING:
    from ..jobs.spec import JobSpec

#: ``TASKS[alias]["OPTIONS"]`` this backend reads, with their defaults.
OPTION_DEFAULTS: dict[str, Any] = {
    # Runs of a task before it is FAILED, for tasks that do not set max_attempts= (as @job).
    "MAX_ATTEMPTS": 3,
}


class UltJobsBackend(BaseTaskBackend):
    """Enqueue ``django.tasks`` tasks as django_ultjobs jobs, in the caller's transaction.

    ``aenqueue`` and ``aget_result`` run their sync twins on the thread of the caller's sync
    code (``thread_sensitive``), so an async view's enqueue joins the same connection.
    """

    task_class = UltJobsTask

    #: ``run_after`` becomes the job's run-at time: no worker claims it earlier.
    supports_defer = True
    #: An ``async def`` task runs on the worker's event loop (rule 85 (one-event-loop)).
    supports_async_task = True
    #: Results are the job's rows, readable from any process (``get_result``, ``refresh``).
    supports_get_result = True
    #: Within a queue, higher priority is claimed first (the same scale as Django's).
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - set(OPTION_DEFAULTS))
        if unknown:
            raise JobConfigurationError(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {unknown}; UltJobsBackend reads "
                f"{sorted(OPTION_DEFAULTS)}"
            )
        max_attempts = self.options.get("MAX_ATTEMPTS", OPTION_DEFAULTS["MAX_ATTEMPTS"])
        # rule 16 (bad-input-refused): bounded as a job's max_attempts= is, by its column
        # (PostgreSQL's integer); past it every task's enqueue was refused, naming the task rather
        # than this setting.
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) \
                or not 1 <= max_attempts <= INT_MAX:
            raise JobConfigurationError(
                f"TASKS[{alias!r}]['OPTIONS']['MAX_ATTEMPTS'] must be a whole number from 1 to "
                f"{INT_MAX}, not {shown(max_attempts)}"
            )
        self.max_attempts: int = max_attempts

    # -- tasks as jobs --------------------------------------------------------------------------

    def job_spec(self, task: Task) -> JobSpec:
        """Return the job spec ``task`` runs as: named by its module path, run by a TaskRunner.

        Raises ``JobConfigurationError`` for options a job cannot have.
        """
        from ..jobs.spec import JobSpec
        from .runner import AsyncTaskRunner, TaskRunner

        max_attempts = getattr(task, "max_attempts", None)
        backoff = getattr(task, "backoff", None)
        max_backoff = getattr(task, "max_backoff", None)
        retry_on = getattr(task, "retry_on", None)
        return JobSpec(
            # An async task runs on the worker's event loop, a sync one on its threads.
            func=(AsyncTaskRunner if inspect.iscoroutinefunction(task.func) else TaskRunner)(task),
            name=task.module_path,
            queue=task.queue_name,
            priority=task.priority,
            max_attempts=self.max_attempts if max_attempts is None else max_attempts,
            # The runner takes the JobContext and hands the task Django's TaskContext.
            takes_context=True,
            concurrency=getattr(task, "concurrency", None),
            backoff=2.0 if backoff is None else backoff,
            max_backoff=3600.0 if max_backoff is None else max_backoff,
            unique=bool(getattr(task, "unique", None)),
            unique_for=getattr(task, "unique_for", None) or 0.0,
            timeout=getattr(task, "timeout", None),
            retry_on=(Exception,) if retry_on is None else retry_on,
            expires_in=getattr(task, "expires_in", None),
        )

    def validate_task(self, task: Task) -> None:
        """Apply Django's rules, then the queue's: the name, queue and options must fit a job.

        A valid task is also registered as a job. Django validates a task when it is defined,
        so importing a tasks module registers its tasks in any process, as importing a
        ``jobs.py`` registers its jobs: that is how a worker finds them.
        """
        from ..jobs import registry

        super().validate_task(task)
        try:
            spec = self.job_spec(task)
            # Not get_job(): that imports unknown dotted names, and this runs mid-import.
            if not _same_job(registry.registered(spec.name), spec):
                registry.register(spec)  # refuses another function under the same name
        except JobConfigurationError as exc:
            raise InvalidTask(str(exc)) from exc

    # -- the contract ---------------------------------------------------------------------------

    def enqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        """Queue ``task`` in the caller's transaction (a rollback un-queues it); return its result.

        Arguments are normalised as Django's ``TaskResult`` does (tuples become lists), then
        must be JSON the database keeps unchanged: otherwise ``JobArgumentError`` (a
        ``TypeError``, as Django's backends raise), and nothing written. The task's options were
        checked when it was built: ``InvalidTask``, as Django's API defines.

        A unique task (``@task(unique=True)``) whose arguments a run already holds queues
        nothing: the result returned is that run's, with its id and its status, and
        ``task_enqueued`` is not sent (nothing was enqueued; rule 66 (held-key-returns-holder)).
        """
        self.validate_task(task)
        self._check_findable(task)
        # Before normalize_json, which walks the arguments recursively: 10,000 levels would
        # raise RecursionError there instead of JobArgumentError naming the argument
        # (rule 16 (bad-input-refused)).
        jsonargs.check_nesting(task.module_path, args, kwargs)
        args = normalize_json(list(args))
        kwargs = normalize_json(dict(kwargs))
        spec = self.job_spec(task)
        if task.run_after is not None:
            spec = spec.using(run_at=_aware(task.run_after))
        job, created = spec.enqueue_or_existing(*args, **kwargs)
        if not created:
            return self._existing_result(task, job)
        result = TaskResult(
            task=task,
            id=str(job.id),
            status=TaskResultStatus.READY,
            enqueued_at=job.created_at,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        # At once, as Django's backends send it; like theirs, it does not wait for a commit.
        task_enqueued.send(type(self), task_result=result)
        return result

    def _existing_result(self, task: Task, job: Any) -> TaskResult:
        """The result of the run holding a unique task's key, as ``get_result`` reads it."""
        from ..conf import jobs_database
        from .results import from_job, load_attempts

        return from_job(job, load_attempts(jobs_database(), job.id),
                        task=as_enqueued(task, queue=job.queue, priority=job.priority,
                                         backend=self.alias),
                        backend=self.alias)

    def _check_findable(self, task: Task) -> None:
        """Refuse a task a worker could not find by its module path: better now than parked.

        A worker imports ``task.module_path`` and needs the task defined there, on a TASKS alias
        that uses this backend (``.using(backend=...)`` onto this backend of a task defined for
        another one would leave the worker with that other backend's task).
        """
        from ..jobs.registry import importable

        path = task.module_path
        if not importable(path):
            raise InvalidTask(
                f"a worker finds a task by its module path, and imports only modules inside an "
                f"installed app or ULTJOBS['JOB_MODULES']; {path} is in neither. Move "
                f"the task into an installed app, or add {path.rpartition('.')[0]!r} (or a "
                "package holding it) to ULTJOBS['JOB_MODULES']."
            )
        try:
            found = import_string(path)
        except ImportError:
            found = None
        if isinstance(found, Task) and found.func is task.func:
            if isinstance(found.get_backend(), UltJobsBackend):
                return
            where = (f"defined for TASKS[{found.backend!r}], a "
                     f"{type(found.get_backend()).__name__}")
        else:
            where = "not a task defined at module level under its function's name"
        raise InvalidTask(
            f"a worker finds a task by its module path, and {path} is {where}. Define it with "
            "@task at module level, on a TASKS alias whose BACKEND is UltJobsBackend."
        )

    async def aenqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]
                       ) -> TaskResult:
        """Queue ``task`` from async code (see ``enqueue``)."""
        return await sync_to_async(self.enqueue, thread_sensitive=True)(task, args, kwargs)

    def get_result(self, result_id: str) -> TaskResult:
        """Return the result of the task enqueued as ``result_id``, read from its job's rows.

        Raises ``TaskResultDoesNotExist`` when there is no such job, or it is not a task's.
        """
        from ..conf import jobs_database
        from ..jobs.registry import get_job
        from ..models import Job
        from .results import from_job, load_attempts
        from .runner import TaskRunner
        from .task_class import unknown_task

        try:
            pk = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        database = jobs_database()
        job = Job.objects.using(database).filter(pk=pk).first()
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        spec = get_job(job.name)
        if spec is None and "." in job.name:
            # A task named by a module path this process cannot find: its code was removed or
            # renamed, or not deployed here yet. Its row still says what became of it (parked,
            # then failed by UNKNOWN_JOB_TIMEOUT, rule 12 (unknown-job-parked)), under a stand-in
            # Task.
            task = unknown_task(job.name, queue=job.queue, priority=job.priority,
                                backend=self.alias)
        elif spec is not None and isinstance(spec.func, TaskRunner):
            task = as_enqueued(spec.func.task, queue=job.queue, priority=job.priority,
                               backend=self.alias)
        else:
            # A plain @job row has no Task to show.
            raise TaskResultDoesNotExist(result_id)
        return from_job(job, load_attempts(database, pk), task=task, backend=self.alias)

    async def aget_result(self, result_id: str) -> TaskResult:
        """Return a result from async code (see ``get_result``)."""
        return await sync_to_async(self.get_result, thread_sensitive=True)(result_id)

    def check(self, **kwargs: Any) -> Iterable[CheckMessage]:
        """Report misconfiguration with system-check ids (``django_ultjobs.E1xx``/``W1xx``)."""
        from .checks import check_tasks_backend

        yield from super().check(**kwargs)
        yield from check_tasks_backend(self, **kwargs)


def _same_job(registered: JobSpec | None, spec: JobSpec) -> bool:
    """Whether ``registered`` already runs ``spec``'s function with its options.

    Queue and priority are left out: they are per enqueue, and ``.using()`` copies of a task
    validate again. Skipping the same job keeps the first (module-level) task as the one the
    runner describes results with.
    """
    if registered is None:
        return False
    runner, other = registered.func, spec.func
    return (
        getattr(runner, "task", None) is not None
        and runner.task.func is other.task.func
        and runner.task.takes_context == other.task.takes_context
        and (registered.max_attempts, registered.concurrency, registered.backoff,
             registered.max_backoff, registered.unique, registered.unique_for)
        == (spec.max_attempts, spec.concurrency, spec.backoff, spec.max_backoff, spec.unique,
            spec.unique_for)
    )


def _aware(moment: datetime) -> datetime:
    # Django accepts a naive run_after when USE_TZ is off; the queue compares aware times.
    return timezone.make_aware(moment) if timezone.is_naive(moment) else moment
