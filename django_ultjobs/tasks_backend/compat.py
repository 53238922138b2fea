"""One import site for the Tasks API: ``django.tasks`` (Django 6.0+) or the ``django-tasks``
backport (Django 5.2 LTS), whose public names are the same but for two exception names.

Every other module of this package imports from here, so the backport is a difference of one file.
"""

from __future__ import annotations

import inspect

try:
    from django.tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    SOURCE = "django.tasks"
except ImportError:
    try:
        from django_tasks import (  # type: ignore[no-redef]
            DEFAULT_TASK_QUEUE_NAME,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task,
            task_backends,
        )
        from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef]
        from django_tasks.base import Task, TaskError  # type: ignore[no-redef]
        from django_tasks.exceptions import (  # type: ignore[no-redef]
            InvalidTaskError as InvalidTask,
        )
        from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[no-redef]
        from django_tasks.signals import (  # type: ignore[no-redef]
            task_enqueued,
            task_finished,
            task_started,
        )
        from django_tasks.utils import normalize_json  # type: ignore[no-redef]
    except ImportError as exc:
        raise ImportError(
            "django_ultjobs.tasks_backend needs the Tasks API: Django 6.0 or later has it as "
            "django.tasks; on Django 5.2 install the backport with "
            "pip install 'django-ultjobs[tasks52]' (the django-tasks package)"
        ) from exc
    SOURCE = "django_tasks"


def _takes_any_keyword(func: object) -> bool:
    try:
        parameters = inspect.signature(func).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


#: Whether ``@task(...)`` hands unknown keyword arguments to the backend's ``task_class``:
#: Django 6.1 and the django-tasks backport do; Django 6.0's ``@task`` rejects them.
TASK_OPTIONS_SUPPORTED: bool = _takes_any_keyword(task)

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "SOURCE",
    "TASK_OPTIONS_SUPPORTED",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
