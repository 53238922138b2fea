"""The test settings plus ``TASKS``: worker processes started by tests/tasks use this module.

In the test process itself ``TASKS`` is applied with ``override_settings`` (tests/tasks/conftest),
so the rest of the suite runs without it.
"""

from __future__ import annotations

from importlib.util import find_spec

from tests.settings import *  # noqa: F403

# Django 6 has django.tasks; Django 5.2 has the same API in the django-tasks backport.
_TASKS_API = "django.tasks" if find_spec("django.tasks") else "django_tasks"

# The test tasks live outside the installed apps: a worker imports their module by path only
# when ULTJOBS["JOB_MODULES"] lists it (rule 40 (project-imports-only)).
JOB_MODULES = ["tests.tasks"]
ULTJOBS = {**ULTJOBS, "JOB_MODULES": JOB_MODULES}  # noqa: F405

TASKS = {
    "default": {
        "BACKEND": "django_ultjobs.tasks_backend.UltJobsBackend",
        "QUEUES": ["default", "emails"],
    },
    "immediate": {
        "BACKEND": f"{_TASKS_API}.backends.immediate.ImmediateBackend",
        "QUEUES": ["default", "emails"],
    },
}
