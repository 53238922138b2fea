"""Retention: prunejobs removes what finished long ago and nothing that can still matter."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_ultjobs.models import Job, JobAttempt, JobEvent, JobStep, Worker

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def _job(alias: str, status: str, finished_days_ago: float | None, **extra: object) -> Job:
    now = timezone.now()
    job = Job.objects.using(alias).create(
        name="add", status=status,
        finished_at=None if finished_days_ago is None else now - timedelta(days=finished_days_ago),
        **extra)
    JobAttempt.objects.using(alias).create(job=job, attempt=1, outcome="succeeded")
    JobStep.objects.using(alias).create(job=job, name="s", result=1)
    return job


def test_prune_keeps_recent_and_live_jobs(alias: str) -> None:
    old_done = _job(alias, "succeeded", 30)
    old_failed = _job(alias, "failed", 20)
    recent = _job(alias, "succeeded", 1)
    queued = _job(alias, "queued", None)
    waiting = _job(alias, "waiting", None)
    Job.objects.using(alias).filter(pk=waiting.pk).update(
        created_at=timezone.now() - timedelta(days=40))
    old_event = JobEvent.objects.using(alias).create(name="e", payload={})
    JobEvent.objects.using(alias).filter(pk=old_event.pk).update(
        created_at=timezone.now() - timedelta(days=30))
    Worker.objects.using(alias).create(id="gone", hostname="h", pid=1, threads=1,
                                       last_seen_at=timezone.now() - timedelta(days=30))
    out = StringIO()
    call_command("prunejobs", days=14, batch_size=1, database=alias, stdout=out)
    left = set(Job.objects.using(alias).values_list("id", flat=True))
    assert left == {recent.id, queued.id, waiting.id}
    assert not JobAttempt.objects.using(alias).filter(job_id__in=[old_done.id, old_failed.id])
    assert not JobStep.objects.using(alias).filter(job_id__in=[old_done.id, old_failed.id])
    # The old event may still wake the job that has been waiting for 40 days: kept.
    assert JobEvent.objects.using(alias).filter(pk=old_event.pk).exists()
    assert not Worker.objects.using(alias).filter(pk="gone").exists()
    assert "pruned 2 jobs (2 attempts, 2 steps)" in out.getvalue()


def test_prune_refuses_nonsense(alias: str) -> None:
    with pytest.raises(CommandError):
        call_command("prunejobs", days=-1, database=alias)
