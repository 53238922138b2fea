"""The app config: discover each installed app's ``jobs.py``, register system checks."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class UltJobsConfig(AppConfig):
    """django_ultjobs: durable background jobs on the site's own database."""

    name = "django_ultjobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Like admin.py: every installed app's jobs.py is imported, so a job is registered in
        # the web process that enqueues it and in the worker that runs it alike.
        autodiscover_modules("jobs")
        from . import checks  # noqa: F401  (registers the system checks)
        from .jobs import (
            periodic,  # noqa: F401  (registers the built-in prune job)
            waiting,  # noqa: F401  (how job.wait() waits)
        )
