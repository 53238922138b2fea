"""Short builders shared by the conformance tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django_ultjobs.models import Job
from django_ultjobs.store import ClaimedJob, JobStore, NewJob, Settlement


def new_job(name: str = "add", *, queue: str = "default", priority: int = 0,
            args: list[Any] | None = None, kwargs: dict[str, Any] | None = None,
            max_attempts: int = 3, delay: float = 0.0, run_at: datetime | None = None,
            traceparent: str = "", enqueued_by: str = "") -> NewJob:
    return NewJob(name=name, queue=queue, priority=priority, args=args or [],
                  kwargs=kwargs or {}, max_attempts=max_attempts, delay=delay, run_at=run_at,
                  traceparent=traceparent, enqueued_by=enqueued_by)


def enqueue(store: JobStore, *jobs: NewJob) -> list[int]:
    return [row.id for row in store.enqueue(list(jobs) or [new_job()])]


def claim(store: JobStore, worker: str = "w1", *, queues: Sequence[str] = ("default",),
          limit: int = 10, timeout: float = 30.0,
          caps: Mapping[str, int] | None = None, uncapped: bool = True,
          kept: Mapping[str, int] | None = None) -> list[ClaimedJob]:
    return store.claim(worker_id=worker, queues=list(queues), limit=limit,
                       visibility_timeout=timeout, caps=caps or {}, uncapped=uncapped, kept=kept)


def settlement(job: ClaimedJob, status: str = "succeeded", *, outcome: str | None = "succeeded",
               **fields: Any) -> Settlement:
    return Settlement(job_id=job.id, token=job.token, status=status, attempt_no=job.attempt,
                      started_at=job.claimed_at, outcome=outcome, **fields)


def row(alias: str, job_id: int) -> Job:
    return Job.objects.using(alias).get(id=job_id)
