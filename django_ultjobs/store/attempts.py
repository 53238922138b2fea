"""A job's attempts as every reader reads them (rule 97 (attempt-on-row)): through
``AttemptRecord``.

A first attempt that succeeded plainly has no attempt row: the job's row holds it
(``Job.attempt_on_row``). The view ``AttemptRecord`` shows it beside the stored rows, its id
``ON_ROW_ID`` + the job's id, so ordered by id every job's attempts come as they happened; nothing
reads ``JobAttempt`` to show a job's history.
"""

from __future__ import annotations

from django.db.models import QuerySet

from ..models import AttemptRecord


def history(job_id: int, *, using: str) -> QuerySet[AttemptRecord]:
    """Every attempt of job ``job_id``, oldest first."""
    return AttemptRecord.objects.using(using).filter(job_id=job_id).order_by("id")
