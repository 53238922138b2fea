"""Route the test apps' models to whichever database the queue under test uses.

Test job bodies write RunLog rows with the plain ORM, as user code would; this router makes those
rows land beside the jobs (SQLite or PostgreSQL), in the test process and in worker processes.
"""

from __future__ import annotations

from typing import Any

from django_ultjobs.conf import get_settings

_APPS = {"testapp", "stepsapp"}


class FollowJobsDatabase:
    def db_for_read(self, model: type, **hints: Any) -> str | None:
        return get_settings().DATABASE if model._meta.app_label in _APPS else None

    db_for_write = db_for_read
