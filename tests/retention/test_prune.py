"""Retention: prunejobs removes what finished long ago and nothing that can still matter."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_ultjobs.models import Job, JobAttempt, JobEvent, JobStep, Worker
from django_ultjobs.store.retention import prune
from tests.stepsapp.jobs import wait_for_order

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


def test_prune_keeps_events_a_queued_job_may_still_consume(alias: str) -> None:
    job = wait_for_order.using(delay=timedelta(hours=1)).enqueue(5)
    Job.objects.using(alias).filter(pk=job.id).update(
        created_at=timezone.now() - timedelta(days=30))
    event = JobEvent.objects.using(alias).create(name="order.shipped", payload={"order_id": 5})
    JobEvent.objects.using(alias).filter(pk=event.pk).update(
        created_at=timezone.now() - timedelta(days=20))
    prune(older_than=timedelta(days=14), using=alias)
    assert JobEvent.objects.using(alias).filter(pk=event.pk).exists()


def test_prune_refuses_nonsense(alias: str) -> None:
    with pytest.raises(CommandError):
        call_command("prunejobs", days=-1, database=alias)


def test_dry_run_counts_what_prune_deletes_and_deletes_nothing(alias: str) -> None:
    _job(alias, "succeeded", 30)
    _job(alias, "failed", 20)
    _job(alias, "succeeded", 1)
    Worker.objects.using(alias).create(id="gone", hostname="h", pid=1, threads=1,
                                       last_seen_at=timezone.now() - timedelta(days=30))
    before = (Job.objects.using(alias).count(), JobAttempt.objects.using(alias).count(),
              Worker.objects.using(alias).count())
    dry = StringIO()
    call_command("prunejobs", "--dry-run", "--days", "14", "--database", alias, stdout=dry)
    assert (Job.objects.using(alias).count(), JobAttempt.objects.using(alias).count(),
            Worker.objects.using(alias).count()) == before
    assert dry.getvalue().startswith("would prune 2 jobs (2 attempts, 2 steps), 0 events, "
                                     "1 workers"), dry.getvalue()
    assert "nothing was deleted" in dry.getvalue()
    real = StringIO()
    call_command("prunejobs", "--days", "14", "--database", alias, stdout=real)
    assert real.getvalue().startswith("pruned 2 jobs (2 attempts, 2 steps), 0 events, 1 workers")


@pytest.mark.parametrize("days", ["nan", "inf", "-inf", "-1", "1e9"])
def test_days_that_are_not_a_sane_number_are_refused_by_name(alias: str, days: str) -> None:
    _job(alias, "succeeded", 30)
    with pytest.raises(CommandError) as refused:
        call_command("prunejobs", f"--days={days}", "--database", alias)
    assert str(refused.value).startswith("--days must be a number of days from 0 to"), \
        str(refused.value)
    assert Job.objects.using(alias).count() == 1


@pytest.mark.parametrize("size", ["0", "-5"])
def test_a_batch_size_below_one_is_refused_by_name(alias: str, size: str) -> None:
    with pytest.raises(CommandError, match=r"^--batch-size must be"):
        call_command("prunejobs", f"--batch-size={size}", "--database", alias)


@pytest.mark.parametrize("pause", ["-1", "nan", "61"])
def test_a_pause_out_of_range_is_refused_by_name(alias: str, pause: str) -> None:
    with pytest.raises(CommandError, match=r"^--pause must be a number of seconds from 0"):
        call_command("prunejobs", f"--pause={pause}", "--database", alias)
