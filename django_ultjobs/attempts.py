"""A job's attempts as every reader reads them (rule 97): through ``AttemptRecord``.

A first attempt that succeeded plainly has no attempt row: the job's row holds it
(``Job.attempt_on_row``). The view ``AttemptRecord`` shows it beside the stored rows, with the
job's id negated as its id; nothing reads ``JobAttempt`` to show a job's history.
"""

from __future__ import annotations

from django.db.models import Case, IntegerField, OuterRef, Q, QuerySet, Value, When

from .models import AttemptRecord

#: Oldest first: stored rows in the order they were written (their ids), then the attempt the
#: job's row holds (a negative id), always a job's last, since that job has succeeded.
OLDEST_FIRST = (Case(When(id__lt=0, then=Value(1)), default=Value(0),
                     output_field=IntegerField()), "id")


def history(job_id: int, *, using: str) -> QuerySet[AttemptRecord]:
    """Every attempt of job ``job_id``, oldest first."""
    return AttemptRecord.objects.using(using).filter(job_id=job_id).order_by(*OLDEST_FIRST)


def later_than_outer() -> QuerySet[AttemptRecord]:
    """The attempts of the outer query's job after the outer attempt row (a subquery's rows):
    its later rows, and the attempt its job's row holds."""
    return AttemptRecord.objects.filter(Q(id__gt=OuterRef("id")) | Q(id__lt=0),
                                        job_id=OuterRef("job_id"))
