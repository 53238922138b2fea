"""Cancel and retry, through the admin and from code, on SQLite and PostgreSQL.

Who may act (view-only staff see, and cannot act), what each action does to the row (fenced on
the status it starts from), that a running job is cancelled by its real worker at the next
heartbeat (the same signal as a lost lease, rule 3 (lost-lease-cancels)) with its attempt recorded
``cancelled``, that a retried job runs again and succeeds, and that every action leaves a LogEntry.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse

from django_ultjobs.models import Job, JobAttempt
from django_ultjobs.operations import cancel_jobs, retry_jobs
from tests.admin.conftest import (
    CANCEL_REASON,
    IN_FLIGHT,
    JOBS,
    client_for,
    make_job,
    post_action,
    post_cancel,
)
from tests.conftest import running_worker, wait_until
from tests.testapp.jobs import block_until, flaky

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

#: Quick beats: a cancel request is seen within a fifth of a second. The lease is long enough
#: that a loaded machine never loses one by being slow.
FAST = {"visibility_timeout": 10.0, "heartbeat_interval": 0.2}


def row(alias: str, job_id: int) -> Job:
    return Job.objects.using(alias).get(id=job_id)


def log_messages(job_id: int) -> list[str]:
    return list(LogEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(Job), object_id=str(job_id),
        action_flag=CHANGE).order_by("id").values_list("change_message", flat=True))


# -- permissions ----------------------------------------------------------------------------------


def test_view_only_user_sees_no_actions_and_cannot_post_one(alias: str, viewer) -> None:
    job = make_job(alias)
    client = client_for(viewer)
    html = client.get(JOBS).content.decode()
    assert 'name="action"' not in html and "cancel_selected" not in html
    response = post_cancel(client, JOBS, [job.id])
    assert response.status_code in (200, 302)
    assert row(alias, job.id).status == "queued"  # nothing happened
    assert log_messages(job.id) == []
    detail = client.get(reverse("admin:django_ultjobs_job_change", args=[job.id]))
    assert 'id="ultjobs-cancel"' not in detail.content.decode()


def test_operator_gets_the_actions(alias: str, operator) -> None:
    job = make_job(alias)
    client = client_for(operator)
    html = client.get(JOBS).content.decode()
    assert 'value="cancel_selected"' in html and 'value="retry_selected"' in html
    assert 'value="cancel_selected"' in client.get(IN_FLIGHT).content.decode()
    detail = client.get(reverse("admin:django_ultjobs_job_change", args=[job.id]))
    assert 'id="ultjobs-cancel"' in detail.content.decode()


# -- cancel ---------------------------------------------------------------------------------------


def test_cancel_queued_is_immediate_and_logged(alias: str, operator) -> None:
    queued = make_job(alias)
    done = make_job(alias, status="succeeded")
    response = post_cancel(client_for(operator), JOBS, [queued.id, done.id])
    assert response.status_code == 302
    job = row(alias, queued.id)
    assert (job.status, job.cancel_requested) == ("cancelled", True)
    assert job.finished_at is not None
    assert row(alias, done.id).status == "succeeded"  # fenced on status: left alone
    assert log_messages(queued.id) == [
        f"Cancelled from the admin before it ran (it was queued or waiting): {CANCEL_REASON}"]
    assert log_messages(done.id) == []
    entry = LogEntry.objects.get(object_id=str(queued.id))
    assert entry.user.username == "operator"


def test_cancel_button_on_the_detail_page_returns_there(alias: str, operator) -> None:
    job = make_job(alias)
    response = post_cancel(client_for(operator), JOBS, [job.id],
                           _ultjobs_from_detail="1")
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:django_ultjobs_job_change", args=[job.id])
    assert row(alias, job.id).status == "cancelled"


def test_cancel_running_job_through_its_real_worker(alias: str, operator, tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = block_until.enqueue(str(release), label="admin-cancel")
    with running_worker(alias, **FAST):
        wait_until(lambda: row(alias, job.id).status == "running", message="job running")
        client = client_for(operator)
        assert f"#{job.id}</a>" in client.get(IN_FLIGHT).content.decode()
        response = post_cancel(client, IN_FLIGHT, [job.id])
        assert response.status_code == 302
        assert row(alias, job.id).cancel_requested is True
        # The worker sees the request at its next heartbeat and cancels the run
        # (rule 3 (lost-lease-cancels)).
        wait_until(lambda: row(alias, job.id).status == "cancelled", message="job cancelled")
    outcomes = list(JobAttempt.objects.using(alias).filter(job_id=job.id)
                    .values_list("attempt", "outcome"))
    assert outcomes == [(1, "cancelled")]
    assert log_messages(job.id) == [
        "Cancel requested from the admin while running: its worker cancels the run at its next "
        f"heartbeat: {CANCEL_REASON}"]
    cancelled = row(alias, job.id)
    assert cancelled.cancel_reason == CANCEL_REASON
    error = JobAttempt.objects.using(alias).get(job_id=job.id).error
    assert error.endswith(f"was cancelled on request: {CANCEL_REASON}")
    assert not release.exists()  # the body never finished: it was unwound


# -- retry ----------------------------------------------------------------------------------------


def test_retry_failed_job_runs_again_and_succeeds(alias: str, operator) -> None:
    job = flaky.using(max_attempts=1).enqueue(1)  # fails on attempt 1, succeeds on 2
    with running_worker(alias, **FAST):
        wait_until(lambda: row(alias, job.id).status == "failed", message="job failed")
        response = post_action(client_for(operator), JOBS, "retry_selected", [job.id])
        assert response.status_code == 302
        retried = row(alias, job.id)
        assert retried.max_attempts == 2  # max(max_attempts, attempt + 1): one more attempt
        wait_until(lambda: row(alias, job.id).status == "succeeded", message="job succeeded")
    job = row(alias, job.id)
    assert (job.attempt, job.result) == (2, "ok on attempt 2")
    outcomes = list(JobAttempt.objects.using(alias).filter(job_id=job.id)
                    .order_by("id").values_list("attempt", "outcome"))
    assert outcomes == [(1, "failed"), (2, "succeeded")]
    assert log_messages(job.id) == [
        "Retried from the admin: queued again, runnable now, one more attempt allowed."]


def test_retry_only_failed_or_cancelled(alias: str, operator) -> None:
    failed = make_job(alias, status="failed", attempt=3, max_attempts=3, cancel_requested=True)
    cancelled = make_job(alias, status="cancelled", attempt=0, max_attempts=5)
    running = make_job(alias, status="running", attempt=1)
    post_action(client_for(operator), JOBS, "retry_selected",
                [failed.id, cancelled.id, running.id])
    again = row(alias, failed.id)
    assert (again.status, again.max_attempts, again.cancel_requested) == ("queued", 4, False)
    assert again.finished_at is None
    assert (row(alias, cancelled.id).status, row(alias, cancelled.id).max_attempts) == (
        "queued", 5)  # it still had attempts left: kept
    assert row(alias, running.id).status == "running"
    assert log_messages(running.id) == []


# -- the operations from code ---------------------------------------------------------------------


def test_operations_from_code_return_what_changed(alias: str) -> None:
    queued = make_job(alias)
    waiting = make_job(alias, status="waiting")
    running = make_job(alias, status="running")
    asked = make_job(alias, status="running", cancel_requested=True)
    failed = make_job(alias, status="failed")
    result = cancel_jobs(Job.objects.all(), using=alias)  # any alias: read on the jobs database
    assert sorted(result.cancelled_ids) == [queued.id, waiting.id]
    assert result.requested_ids == (running.id,)
    assert (result.cancelled, result.requested) == (2, 1)
    # Again: nothing left to do (a running job is asked once; finished ones never change).
    assert cancel_jobs([queued.id, running.id, asked.id, failed.id], using=alias).cancelled == 0
    assert retry_jobs([queued.id, failed.id, running.id], using=alias).retried_ids == (
        queued.id, failed.id)
    assert retry_jobs([queued.id, failed.id], using=alias).retried == 0


def test_operations_chunk_large_selections(alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from django_ultjobs import operations

    monkeypatch.setattr(operations, "CHUNK", 3)
    ids = [make_job(alias).id for _ in range(8)]
    assert cancel_jobs(ids, using=alias).cancelled == 8
    assert retry_jobs(Job.objects.filter(id__in=ids), using=alias).retried == 8
    assert set(Job.objects.using(alias).values_list("status", flat=True)) == {"queued"}
