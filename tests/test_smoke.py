"""The shortest path through the queue, on both engines: enqueue, run, settle, record."""

import pytest

from django_ultjobs.models import Job, JobAttempt
from tests.conftest import running_worker, wait_until
from tests.testapp.jobs import add, async_add, flaky

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_enqueue_run_and_retry(alias: str) -> None:
    job = add.enqueue(2, 3)
    retried = flaky.enqueue(2)
    with running_worker(alias):
        wait_until(lambda: Job.objects.using(alias).filter(
            status="succeeded", id__in=[job.id, retried.id]).count() == 2)
    job.refresh_from_db()
    assert (job.status, job.result, job.attempt) == ("succeeded", 5, 1)
    outcomes = list(JobAttempt.objects.using(alias).filter(job_id=retried.id)
                    .order_by("attempt").values_list("attempt", "outcome"))
    assert outcomes == [(1, "retrying"), (2, "retrying"), (3, "succeeded")]


def test_an_async_job_runs_to_completion(alias: str) -> None:
    job = async_add.enqueue(2, 3)
    with running_worker(alias):
        wait_until(lambda: Job.objects.using(alias).filter(id=job.id, status="succeeded").exists())
    job.refresh_from_db()
    assert (job.status, job.result, job.attempt) == ("succeeded", 5, 1)
