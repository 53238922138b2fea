"""The progress of a task's run (rule 79 (progress-throttled-fenced)), read from its job row.

Django's ``TaskResult`` is a frozen dataclass with slots: it takes no attribute it does not
declare, and its ``refresh()`` copies a fixed list of them. So the progress is read here, fresh
on each call, from the row a worker's ``context.job.set_progress(...)`` wrote.
"""

from __future__ import annotations

from typing import Any


def progress_of(result: Any) -> dict[str, Any] | None:
    """The last ``{"done", "total", "message"}`` of the task behind ``result`` (a
    ``TaskResult`` or its id), or None before its run reported any."""
    # Imported here, as the backend does: the backend module loads before the app registry.
    from ..conf import jobs_database
    from ..models import Job

    result_id = getattr(result, "id", result)
    try:
        pk = int(result_id)
    except (TypeError, ValueError):
        return None
    progress = (Job.objects.using(jobs_database()).filter(pk=pk)
                .values_list("progress", flat=True).first())
    return progress if isinstance(progress, dict) else None
