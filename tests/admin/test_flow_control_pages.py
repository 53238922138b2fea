"""The admin's side of timeouts, expiry and cancel reasons (rules 56 (overrun-reported),
58 (expired-never-runs), 59 (cancel-reason-kept)), both engines: the cancel action asks for a reason
before it cancels anything, a job's page and the list show the reason and an expiry, and the workers
page and a job's page show a run overrunning its timeout."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from django_ultjobs.models import Job, Worker
from tests.admin.conftest import JOBS, WORKERS, client_for, make_job, page, post_action

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def detail(job_id: int) -> str:
    return reverse("admin:django_ultjobs_job_change", args=[job_id])


def test_the_cancel_action_asks_for_a_reason_before_cancelling(alias: str, operator) -> None:
    """rule 59 (cancel-reason-kept): the first post shows the form and cancels nothing; an empty
    reason is refused on the form; the answer cancels, with the reason stored and shown on the job's
    page."""
    job = make_job(alias)
    client = client_for(operator)
    asked = post_action(client, JOBS, "cancel_selected", [job.id])
    html = asked.content.decode()
    assert asked.status_code == 200 and 'name="reason"' in html
    assert "1 selected job will be cancelled" in html and f"#{job.id}" in html
    assert Job.objects.using(alias).get(id=job.id).status == "queued"

    empty = post_action(client, JOBS, "cancel_selected", [job.id], reason="  ",
                        _ultjobs_cancel_confirmed="1")
    assert empty.status_code == 200 and "This field is required" in empty.content.decode()
    assert Job.objects.using(alias).get(id=job.id).status == "queued"

    done = post_action(client, JOBS, "cancel_selected", [job.id], reason="duplicate <order>",
                       _ultjobs_cancel_confirmed="1")
    assert done.status_code == 302
    assert [str(m) for m in get_messages(done.wsgi_request)] == [
        "Cancelled 1 job that had not started."]
    row = Job.objects.using(alias).get(id=job.id)
    assert (row.status, row.cancel_reason) == ("cancelled", "duplicate <order>")
    shown = page(client, detail(job.id))
    assert "cancelled on request: duplicate &lt;order&gt;" in shown  # escaped, never markup


def test_the_detail_button_keeps_its_way_back_through_the_form(alias: str, operator) -> None:
    job = make_job(alias)
    client = client_for(operator)
    asked = post_action(client, JOBS, "cancel_selected", [job.id], _ultjobs_from_detail="1")
    assert 'name="_ultjobs_from_detail" value="1"' in asked.content.decode()
    done = post_action(client, JOBS, "cancel_selected", [job.id], _ultjobs_from_detail="1",
                       reason="not needed", _ultjobs_cancel_confirmed="1")
    assert done["Location"] == detail(job.id)


def test_an_expired_job_reads_expired_in_the_list_and_on_its_page(alias: str, operator) -> None:
    """rule 58 (expired-never-runs): cancelled with no cancel requested and an expiry set."""
    expires = timezone.now() - timedelta(minutes=1)
    job = make_job(alias, status="cancelled", expires_at=expires, finished_at=timezone.now(),
                   last_error="expired: not started by …")
    asked = make_job(alias, status="cancelled", cancel_requested=True, expires_at=expires)
    client = client_for(operator)
    listing = page(client, JOBS)
    assert listing.count('<span class="ultjobs-flag">expired</span>') == 1
    shown = page(client, detail(job.id))
    assert "expired: not started by" in shown and "never run" in shown
    assert "expired: not started by" not in page(client, detail(asked.id))


def test_an_overrunning_run_is_shown_on_the_workers_page_and_the_jobs_page(
        alias: str, operator) -> None:
    """rule 56 (overrun-reported): what the worker wrote on its row, linked to the job, with its
    thread."""
    job = make_job(alias, status="running", timeout=30.0, worker_id="w1:1:abc",
                   claim_token="00000000-0000-0000-0000-000000000001")
    Worker.objects.using(alias).create(
        id="w1:1:abc", hostname="w1", pid=1, threads=4,
        overrunning=[{"job_id": job.id, "job": "add", "thread": "ultjobs-exec-3",
                      "timeout": 30.0, "attempt": 1}])
    client = client_for(operator)
    workers = page(client, WORKERS)
    assert "ultjobs-exec-3" in workers and f"#{job.id}" in workers
    assert "past its 30 s timeout" in workers
    shown = page(client, detail(job.id))
    assert "overrunning: still running past its 30 s timeout on thread ultjobs-exec-3" in shown
