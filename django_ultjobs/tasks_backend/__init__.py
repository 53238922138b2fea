"""django_ultjobs as a ``TASKS`` backend for ``django.tasks`` (Django 6) and django-tasks (5.2).

```python
TASKS = {"default": {"BACKEND": "django_ultjobs.tasks_backend.UltJobsBackend",
                     "QUEUES": ["default", "emails"]}}
```
"""

from __future__ import annotations

from .backend import UltJobsBackend
from .progress import progress_of
from .task_class import UltJobsTask, UltJobsTaskContext, task

__all__ = ["UltJobsBackend", "UltJobsTask", "UltJobsTaskContext", "progress_of", "task"]
