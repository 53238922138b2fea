"""The task class that carries django_ultjobs' options through ``@task(...)``, and its context."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..exceptions import JobConfigurationError
from . import compat
from .compat import InvalidTask, Task, TaskContext

if TYPE_CHECKING:
    from ..jobs.spec import JobSpec
    from ..runtime.context import JobContext


@dataclass(frozen=True, slots=True, kw_only=True)
class UltJobsTask(Task):
    """A ``django.tasks`` Task with the options of ``@job``: ``UltJobsBackend.task_class``.

    ``@task(max_attempts=5, concurrency=2)`` reaches these fields on Django 6.1 and on the
    django-tasks backport, whose ``@task`` hands unknown keyword arguments to the backend's
    ``task_class``. None means the backend's default.
    """

    #: Runs before the task is FAILED, counting a worker that died mid-run (rule 1 (leased-claim)).
    #: None takes the backend's ``OPTIONS["MAX_ATTEMPTS"]`` (3, as ``@job``).
    max_attempts: int | None = None
    #: Fleet-wide cap on simultaneous runs of this task (rule 5 (fleet-cap)); None means no cap.
    concurrency: int | None = None
    #: Retry backoff: ``backoff * 2 ** (attempt - 1)`` seconds with jitter, capped at
    #: ``max_backoff`` (None: 2 s and one hour, as ``@job``).
    backoff: float | None = None
    max_backoff: float | None = None
    #: Unique tasks (rules 65 (one-key-holder) to 67 (unique-for-window)): while a run of this task
    #: with the same arguments is queued, running or waiting (or finished less than ``unique_for``
    #: seconds ago), ``enqueue()`` returns that run's result instead of queueing another. None: not
    #: unique.
    unique: bool | None = None
    unique_for: float | None = None
    #: Seconds a run may take before it is cancelled as timed out (rule 55 (timeout-cancels)); None:
    #: no limit.
    timeout: float | None = None
    #: Only these exceptions are retried (rule 57 (retry-on-only)); None: every ``Exception``.
    retry_on: tuple[type[BaseException], ...] | None = None
    #: Seconds after the enqueue past which an unstarted task never runs
    #: (rule 58 (expired-never-runs)).
    expires_in: float | None = None

    def job_spec(self) -> JobSpec:
        """Return the job spec a worker runs this task as.

        The registry calls this when a worker claims a job named after this task's module path
        and nothing is registered under that name yet (``registry.get_job``).
        """
        backend = self.get_backend()
        make: Callable[[Task], JobSpec] | None = getattr(backend, "job_spec", None)
        if make is None:
            raise JobConfigurationError(
                f"task {self.module_path} uses TASKS[{self.backend!r}], a "
                f"{type(backend).__name__}; only django_ultjobs.tasks_backend.UltJobsBackend "
                "runs it in runjobworker"
            )
        return make(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class UltJobsTaskContext(TaskContext):
    """Django's ``TaskContext``, plus the run's ``JobContext`` as ``job``.

    ``context.attempt`` and ``context.task_result`` behave as Django documents them; ``job``
    adds what only a durable worker has: ``context.job.cancelled`` (lost lease, cancel request,
    drain) and durable steps (``context.job.step("charge", fn)``).
    """

    job: JobContext


def task(
    function: Callable[..., Any] | None = None,
    *,
    max_attempts: int | None = None,
    concurrency: int | None = None,
    backoff: float | None = None,
    max_backoff: float | None = None,
    unique: bool | None = None,
    unique_for: float | None = None,
    timeout: float | None = None,
    retry_on: tuple[type[BaseException], ...] | None = None,
    expires_in: float | None = None,
    **kwargs: Any,
) -> Any:
    """Define a task as ``django.tasks.task`` does, with django_ultjobs' options typed.

    Equivalent to ``@django.tasks.task(...)`` where that carries backend options (Django 6.1,
    the django-tasks backport); elsewhere, passing an option is an error that says so instead
    of Django's bare ``TypeError``.
    """
    options = {
        name: value
        for name, value in (("max_attempts", max_attempts), ("concurrency", concurrency),
                            ("backoff", backoff), ("max_backoff", max_backoff),
                            ("unique", unique), ("unique_for", unique_for),
                            ("timeout", timeout), ("retry_on", retry_on),
                            ("expires_in", expires_in))
        if value is not None
    }
    if options and not compat.TASK_OPTIONS_SUPPORTED:
        raise JobConfigurationError(
            f"this version of {compat.SOURCE}'s @task cannot carry backend options "
            f"({', '.join(sorted(options))}): Django 6.1 added that. Upgrade to Django 6.1 (or, "
            "on Django 5.2, use the django-tasks backport), or leave the options out to get "
            "the backend's defaults."
        )
    return compat.task(function, **kwargs, **options)


def as_enqueued(task: Task, *, queue: str, priority: int | None, backend: str | None = None
                ) -> Task:
    """Return ``task`` with the queue, priority (and TASKS alias) a job was enqueued with."""
    changes: dict[str, Any] = {}
    if queue != task.queue_name:
        changes["queue_name"] = queue
    if priority is not None and priority != task.priority:
        changes["priority"] = priority
    if backend is not None and backend != task.backend:
        changes["backend"] = backend
    if not changes:
        return task
    try:
        return task.using(**changes)
    except InvalidTask:
        # Enqueued through another TASKS alias whose QUEUES this one does not list: describing
        # the task must not fail a run, nor a result lookup.
        return task


def unknown_task(name: str, *, queue: str, priority: int, backend: str) -> Task:
    """A stand-in ``Task`` for a job named ``name`` that no code here defines, so its result can
    still be read (rule 12 (unknown-job-parked)): it shows the module path, queue and priority the
    job was enqueued with, and calling it raises ``UnknownJobError``.

    Built without validation: validating a task registers it as a job, and nothing must make
    this process believe it knows a job it does not.
    """
    from ..exceptions import UnknownJobError

    module, _, qualname = name.rpartition(".")

    def missing(*args: Any, **kwargs: Any) -> Any:
        raise UnknownJobError(f"no code defines the task {name}: it was removed or renamed, or "
                              "is not deployed here")

    missing.__module__, missing.__qualname__, missing.__name__ = module, qualname, qualname
    task = object.__new__(Task)
    values = {"func": missing, "priority": priority, "backend": backend, "queue_name": queue}
    for f in dataclasses.fields(Task):
        if f.name in values:
            value = values[f.name]
        elif f.default is not dataclasses.MISSING:
            value = f.default
        else:
            value = f.default_factory()  # type: ignore[misc]
        object.__setattr__(task, f.name, value)
    return task
