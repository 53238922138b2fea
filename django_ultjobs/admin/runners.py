"""Which child process runs each in-flight job of a worker with ``runjobworker --pool process``:
read from the worker's row (``Worker.runners``, written with its heartbeat) in the in-flight
page's own query, one subquery per row, no query of its own."""

from __future__ import annotations

from typing import Any

from django.db.models import JSONField, OuterRef, QuerySet, Subquery
from django.utils.translation import gettext

from ..models import Worker

#: The annotation the in-flight page's rows carry: their worker's runners, or None.
RUNNERS = "worker_runners"


def with_runners(rows: QuerySet[Any]) -> QuerySet[Any]:
    """``rows`` (jobs), each with its worker's runners."""
    runners = Worker.objects.filter(id=OuterRef("worker_id")).values("runners")[:1]
    return rows.annotate(**{RUNNERS: Subquery(runners, output_field=JSONField())})


def runner_text(job: Any) -> str | None:
    """``child 1234`` for a job a child process runs; None for one on a thread."""
    runners = getattr(job, RUNNERS, None)
    pid = runners.get(str(job.pk)) if isinstance(runners, dict) else None
    return gettext("child %(pid)s") % {"pid": pid} if pid is not None else None
