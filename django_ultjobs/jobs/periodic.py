"""The periodic jobs of this process: those declared with a schedule, and the built-in prune.

``django_ultjobs.prune`` deletes what ``RETENTION_DAYS`` says may go, as ``manage.py prunejobs``
does, on ``ULTJOBS["PRUNE_SCHEDULE"]`` (daily at 03:00 UTC unless set; None turns it off). Its
schedule comes from the settings when asked, not from its declaration, so a change of setting
(or ``override_settings`` in a test) applies without a new registration.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import timedelta
from typing import Any, Protocol

from ..conf import get_settings
from ..core.schedules import Schedule
from ..exceptions import JobOptionError
from ..observability.logs import log_event
from ..store.retention import prune
from .registry import job, registered_jobs
from .spec import JobSpec

logger = logging.getLogger(__name__)

#: The built-in prune job's name.
PRUNE_JOB = "django_ultjobs.prune"


class Run(Protocol):
    """What the prune job uses of its run's ``JobContext`` (a layer above this one)."""

    def wait(self, seconds: float) -> bool: ...

    def raise_if_cancelled(self) -> None: ...


@job(name=PRUNE_JOB, max_attempts=3, backoff=60.0, takes_context=True)
def prune_finished_jobs(ctx: Run) -> dict[str, Any]:
    """Delete finished jobs, old events and dead workers past ``RETENTION_DAYS``; return the
    counts (kept as the job's result, so the admin shows what each run removed).

    A paced prune of millions of rows runs for minutes, so a cancel (a request, the worker's
    drain) stops it between two batches, each committed: the next run deletes the rest."""
    conf = get_settings()
    if conf.RETENTION_DAYS is None:
        return {"skipped": "ULTJOBS['RETENTION_DAYS'] is None: retention is off"}

    def rest(seconds: float) -> None:
        ctx.wait(seconds)
        ctx.raise_if_cancelled()

    pruned = prune(older_than=timedelta(days=conf.RETENTION_DAYS), using=conf.DATABASE,
                   on_batch=lambda _jobs: ctx.raise_if_cancelled(), rest=rest)
    return dataclasses.asdict(pruned)


def prune_schedule() -> Schedule | None:
    """The built-in prune job's schedule from the settings; None when it is off, or when the
    setting cannot be read (``django_ultjobs.E040`` says why)."""
    conf = get_settings()
    if conf.PRUNE_SCHEDULE is None or conf.RETENTION_DAYS is None:
        return None
    try:
        return Schedule(cron=conf.PRUNE_SCHEDULE, timezone=conf.PRUNE_TIMEZONE)
    except JobOptionError as exc:
        log_event(logger, logging.WARNING, "jobs.scheduler.prune-schedule-refused",
                  error=str(exc))
        return None


def periodic_jobs() -> dict[str, JobSpec]:
    """Every job this process schedules, by name: the declared ones, and the prune job when
    it is on."""
    jobs = {name: spec for name, spec in registered_jobs().items() if spec.schedule is not None}
    schedule = prune_schedule()
    spec = registered_jobs().get(PRUNE_JOB)
    if schedule is not None and spec is not None:
        jobs[PRUNE_JOB] = dataclasses.replace(spec, schedule=schedule)
    return jobs
