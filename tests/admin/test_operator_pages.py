"""What an operator reads first, on SQLite and PostgreSQL: workers judged by their own timings,
errors led by their exception line, the lease clock only where it means something, actions that
say what they skipped, read-only pages titled and linked as such, and fleet slots with their cap
and the runs waiting for them.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.contrib.messages import get_messages
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from django_ultjobs.models import Job, JobAttempt, Slot, Worker
from tests.admin.conftest import (
    APP_INDEX,
    JOBS,
    SLOTS,
    WORKERS,
    client_for,
    make_job,
    page,
    post_action,
    post_cancel,
)

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/shop/jobs.py", line 12, in charge_card\n'
    "    provider.capture(order)\n"
    '  File "/srv/shop/provider.py", line 80, in capture\n'
    "    raise PaymentDeclined(code)\n"
    "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    "shop.provider.PaymentDeclined: card declined <code 51>\n"
)
EXCEPTION = "shop.provider.PaymentDeclined: card declined &lt;code 51&gt;"


def detail(job_id: int) -> str:
    return reverse("admin:django_ultjobs_job_change", args=[job_id])


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


# -- workers: judged by their own --visibility-timeout and --heartbeat-interval ------------------


def run_burst_worker(alias: str, *flags: str) -> Worker:
    """Run ``runjobworker --burst`` with ``flags`` on an empty queue; return its row, running.

    The worker registers its row, finds nothing, stops and marks the row stopped; the row is
    then made to look like a live worker's whose last heartbeat was a while ago.
    """
    before = set(Worker.objects.using(alias).values_list("id", flat=True))
    call_command("runjobworker", "--burst", "--database", alias, *flags)
    (row,) = Worker.objects.using(alias).exclude(id__in=before)
    return row


def test_worker_rows_keep_the_workers_own_timings(alias: str, viewer) -> None:
    patient = run_burst_worker(alias, "--visibility-timeout", "120", "--heartbeat-interval", "40")
    eager = run_burst_worker(alias, "--visibility-timeout", "10", "--heartbeat-interval", "2")
    assert (patient.visibility_timeout, patient.heartbeat_interval) == (120.0, 40.0)
    assert (eager.visibility_timeout, eager.heartbeat_interval) == (10.0, 2.0)

    now = timezone.now()
    workers = Worker.objects.using(alias)
    # Healthy with a 120 s lease, 50 s after its heartbeat (the setting's 30 s would call it
    # silent).
    workers.filter(id=patient.id).update(stopped_at=None, last_seen_at=now - timedelta(seconds=50))
    # Paused with a 10 s lease, 26 s after its heartbeat: its leases are gone.
    workers.filter(id=eager.id).update(stopped_at=None, last_seen_at=now - timedelta(seconds=26))
    client = client_for(viewer)
    html = page(client, WORKERS)
    states = dict(re.findall(r'<th class="field-id_display"><a [^>]+>([^<]+)</a></th>.*?'
                             r'<td class="field-state">(.*?)</td>', html, re.S))
    assert states[patient.id].startswith("running"), states
    assert "silent for 26 s" in states[eager.id], states
    assert "late" not in states[patient.id]  # it ticks every 40 s: two missed ticks are 80 s
    workers.filter(id=patient.id).update(last_seen_at=now - timedelta(seconds=95))
    assert re.search(r"late: no heartbeat for \d min \(every 40 s\)", page(client, WORKERS))
    detail_html = page(client, reverse("admin:django_ultjobs_worker_change",
                                                 args=[quote(patient.id)]))
    assert "visibility timeout 120 s, heartbeat every 40 s" in detail_html
    # The summary counts the workers that are running by their own timeout.
    assert re.search(r'id="ultjobs-workers"><a [^>]+>1</a>', page(client, APP_INDEX))


def test_a_worker_row_without_timings_is_judged_by_the_setting(alias: str, viewer) -> None:
    # Written by a worker that ran before the timings were kept.
    now = timezone.now()
    Worker.objects.using(alias).create(id="old:1:aaaaaa", hostname="old", pid=1, threads=1,
                                       last_seen_at=now - timedelta(seconds=45))
    html = page(client_for(viewer), WORKERS)
    assert "silent for 45 s" in html  # ULTJOBS["VISIBILITY_TIMEOUT"] is 30 s by default


# -- a job's page: what an operator looks for first -----------------------------------------------


def test_an_attempts_error_shows_the_exception_line_first(alias: str, viewer) -> None:
    job = make_job(alias, status="failed", attempt=1, max_attempts=1, last_error=TRACEBACK)
    JobAttempt.objects.using(alias).create(job_id=job.id, attempt=1, outcome="failed",
                                           error=TRACEBACK)
    html = page(client_for(viewer), detail(job.id))
    cell = html[html.index('<td class="field-error_display">'):]
    # The exception line leads the cell; the traceback follows, behind a <details>.
    assert cell.index(EXCEPTION) < cell.index("<details") < cell.index("Traceback (most recent")
    assert f'<p class="ultjobs-exception">{EXCEPTION}</p>' in cell
    last = html[html.index('class="form-row field-last_error_display"'):]
    assert last.index(EXCEPTION) < last.index("<details")


def test_an_error_without_a_traceback_is_shown_whole(alias: str, viewer) -> None:
    job = make_job(alias, status="queued")
    JobAttempt.objects.using(alias).create(job_id=job.id, attempt=1, outcome="suspended",
                                           error='no job registered as "gone"')
    html = page(client_for(viewer), detail(job.id))
    assert '<p class="ultjobs-exception">no job registered as &quot;gone&quot;</p>' in html
    cell = html[html.index('<td class="field-error_display">'):]
    assert "<details" not in cell[:cell.index("</td>")]


def test_the_lease_clock_shows_only_on_a_live_job(alias: str, viewer) -> None:
    ahead = timezone.now() + timedelta(seconds=17)
    client = client_for(viewer)
    for status in ("failed", "succeeded", "cancelled"):
        finished = make_job(alias, status=status, visible_at=ahead)
        html = page(client, detail(finished.id)).lower()
        assert "visible at" not in html and "in 17 s" not in html and "in 16 s" not in html, \
            status
    queued = make_job(alias, status="queued", visible_at=ahead)
    assert "visible at (the lease clock)" in page(client, detail(queued.id)).lower()


def test_state_outcome_and_error_come_before_history_and_call(alias: str, viewer) -> None:
    job = make_job(alias, status="failed", attempt=3, max_attempts=3, last_error=TRACEBACK)
    JobAttempt.objects.using(alias).create(job_id=job.id, attempt=3, outcome="failed")
    html = page(client_for(viewer), detail(job.id))
    order = [html.index(marker) for marker in (
        "field-status_display", "field-outcome", "field-last_error_display",
        'id="attempts-group"', "field-args_display", "field-enqueued_by")]
    assert order == sorted(order)
    assert "failed after 3 attempts: no retry left" in html


# -- actions say what they skipped, and why -------------------------------------------------------


def test_cancel_says_what_it_skipped_and_why(alias: str, operator) -> None:
    queued = make_job(alias)
    done = make_job(alias, status="succeeded")
    failed = make_job(alias, status="failed")
    response = post_cancel(client_for(operator), JOBS,
                           [queued.id, done.id, failed.id, 999_999])
    assert messages_of(response) == [
        "Cancelled 1 job that had not started.",
        "Skipped 3 jobs (1 already failed, 1 already succeeded, 1 no longer in the database): "
        "only queued, waiting or running jobs can be cancelled, a running one once.",
    ]
    assert Job.objects.using(alias).get(id=queued.id).status == "cancelled"


def test_cancel_of_nothing_cancellable_says_so(alias: str, operator) -> None:
    done = make_job(alias, status="succeeded")
    asked = make_job(alias, status="running", cancel_requested=True)
    response = post_cancel(client_for(operator), JOBS, [done.id, asked.id])
    assert messages_of(response) == [
        "Nothing was cancelled. Skipped 2 jobs (1 running and already asked to stop, "
        "1 already succeeded): only queued, waiting or running jobs can be cancelled, a running "
        "one once."]


def test_retry_says_what_it_skipped_and_why(alias: str, operator) -> None:
    failed = make_job(alias, status="failed", attempt=1, max_attempts=1)
    running = make_job(alias, status="running")
    response = post_action(client_for(operator), JOBS, "retry_selected", [failed.id, running.id])
    assert messages_of(response) == [
        "Queued 1 job again.",
        "Skipped 1 job (1 still running): only failed or cancelled jobs can be retried.",
    ]


def _taken_over(alias: str) -> tuple[int, Job]:
    """A failed unique job, and the queued job a later enqueue of its key made
    (rule 66 (held-key-returns-holder))."""
    from tests.testapp.jobs import unique_touch

    old = unique_touch.enqueue("a")
    Job.objects.using(alias).filter(id=old.id).update(
        status="failed", finished_at=timezone.now() - timedelta(minutes=1))
    holder = unique_touch.enqueue("a")
    assert holder.id != old.id
    return old.id, holder


def test_retry_beside_the_keys_holder_is_refused_naming_it(alias: str, operator) -> None:
    # rule 107 (retry-takes-key-back): the retry would run a second body of the key at once; the
    # message names the job holding it and the action that runs it anyway.
    old, holder = _taken_over(alias)
    plain = make_job(alias, status="failed")
    response = post_action(client_for(operator), JOBS, "retry_selected", [old, plain.id])
    assert messages_of(response) == [
        "Queued 1 job again.",
        f"Not retried: job {old}: key “{holder.unique_key}” is held by job {holder.id}. Two "
        "runs of one key would run at once; to retry anyway, without the key, use “Retry "
        "selected jobs now, even beside their unique key's holder”.",
    ]
    assert Job.objects.using(alias).get(id=old).status == "failed"
    [alone] = messages_of(post_action(client_for(operator), JOBS, "retry_selected", [old]))
    assert alone.startswith("Not retried: job ")
    # Its page shows the key it held, the one the retry checked.
    assert holder.unique_key in page(client_for(operator), detail(old))


def test_retry_keyless_runs_it_beside_the_holder_when_asked(alias: str, operator) -> None:
    old, holder = _taken_over(alias)
    response = post_action(client_for(operator), JOBS, "retry_keyless", [old])
    assert messages_of(response) == [
        "Queued 1 job again.",
        "1 of them runs without its unique key, beside the job that holds it.",
    ]
    row = Job.objects.using(alias).get(id=old)
    assert (row.status, row.unique_key) == ("queued", None)
    assert Job.objects.using(alias).get(id=holder.id).unique_key == holder.unique_key


def test_select_all_names_the_rest_without_counting_it(alias: str, operator) -> None:
    queued = make_job(alias)
    make_job(alias, status="succeeded")
    response = post_cancel(client_for(operator), JOBS, [queued.id],
                           select_across="1")
    assert messages_of(response)[-1].startswith("Skipped the other selected jobs: only queued")


# -- read-only pages say "View" ----------------------------------------------------------------


@pytest.mark.parametrize("model, title", [
    ("job", "Select job to view"),
    ("inflightjob", "Select in-flight job to view"),
    ("heldslot", "Held slots"),
    ("lostslotcancellation", "Lost-slot cancellations"),
    ("worker", "Select worker to view"),
    ("queuepause", "Paused queues"),
])
def test_read_only_lists_are_titled_for_viewing(alias: str, operator, model: str,
                                                title: str) -> None:
    html = page(client_for(operator), reverse(f"admin:django_ultjobs_{model}_changelist"))
    assert f"<h1>{title}</h1>" in html
    assert "to change" not in html


def test_the_index_links_every_jobs_page_as_view(alias: str, operator) -> None:
    client = client_for(operator)
    for url in (APP_INDEX, reverse("admin:index")):
        html = page(client, url)
        section = html[html.index('class="app-django_ultjobs'):]
        section = section[:section.index("</table>")]
        # Jobs, in flight, held slots, lost slots, workers, paused queues, batches, workflows.
        assert section.count('class="viewlink"') == 8 and "changelink" not in section


# -- fleet slots: the cap, and the runs waiting for a slot --------------------------------------


def test_held_slots_show_the_cap_and_the_runs_waiting(alias: str, viewer) -> None:
    now = timezone.now()
    running = make_job(alias, name="worker_serial_block_until", status="running")
    for _ in range(2):  # runnable, waiting for the one slot
        make_job(alias, name="worker_serial_block_until", visible_at=now - timedelta(seconds=10))
    make_job(alias, name="worker_serial_block_until", visible_at=now + timedelta(hours=1))
    Slot.objects.using(alias).create(key="job:worker_serial_block_until", slot=0,
                                         holder=f"w:1:abc:{running.id}",
                                         expires_at=now + timedelta(seconds=20))
    client = client_for(viewer)
    html = page(client, SLOTS)
    assert '<td class="field-cap">1</td>' in html
    assert re.search(r'<td class="field-runs_waiting"><a href="[^"]+\?name='
                     r'worker_serial_block_until&amp;lease=runnable">2</a></td>', html)
    # The summary says the oldest runnable job waits for its slot, not for a worker.
    summary = page(client, APP_INDEX)
    assert re.search(r"runnable for (9|10|11) s: .*waiting for a fleet slot "
                     r"\(job:worker_serial_block_until: 1 of 1 held\)", summary)


def test_a_runnable_job_with_a_free_slot_is_not_said_to_wait_for_one(alias: str,
                                                                    viewer) -> None:
    make_job(alias, name="worker_serial_block_until", visible_at=timezone.now())
    html = page(client_for(viewer), APP_INDEX)
    assert "runnable for" in html and "waiting for a fleet slot" not in html
