"""The admin pages through Django's test client, on SQLite and PostgreSQL: what they show.

Jobs are written as workers leave them (through the ORM), so each page is checked against
known rows: the in-flight view, the lease clock, escaping and truncation of payloads, the
attempts and steps of a job, the held slots and their holders, lost-slot cancellations and what
became of their jobs, the workers, and the summary on the app index.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils import timezone

from django_ultjobs.core.slot_keys import keyed_slot_key
from django_ultjobs.models import Job, JobAttempt, JobStep, Slot, Worker
from tests.admin.conftest import (
    APP_INDEX,
    IN_FLIGHT,
    JOBS,
    LOST,
    SLOTS,
    WORKERS,
    client_for,
    make_job,
    page,
)
from tests.testapp.jobs import add

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

WORKER_ID = "host-a:4242:abc123"


def result_ids(html: str) -> list[int]:
    """The job ids listed in a changelist's result table, in order."""
    return [int(i) for i in re.findall(r'class="field-job_id"><a href="[^"]+">#(\d+)</a>', html)]


def test_every_page_renders_for_a_view_only_user(alias: str, viewer) -> None:
    job = make_job(alias)
    client = client_for(viewer)
    for url in (JOBS, IN_FLIGHT, SLOTS, LOST, WORKERS, APP_INDEX,
                reverse("admin:django_ultjobs_job_change", args=[job.id])):
        page(client, url)


def test_jobs_list_columns_filters_and_in_flight_view(alias: str, viewer) -> None:
    now = timezone.now()
    queued = make_job(alias, queue="mail", enqueued_by="user:alice")
    live = make_job(alias, status="running", attempt=2, max_attempts=5, worker_id=WORKER_ID,
                    claimed_at=now, visible_at=now + timedelta(seconds=30))
    lapsed = make_job(alias, status="running", attempt=1, worker_id=WORKER_ID,
                      claimed_at=now - timedelta(minutes=5),
                      visible_at=now - timedelta(minutes=1))
    done = make_job(alias, status="succeeded", attempt=1)
    client = client_for(viewer)

    html = page(client, JOBS)
    assert result_ids(html) == [done.id, lapsed.id, live.id, queued.id]  # newest first
    assert "2/5" in html and "user:alice" in html and WORKER_ID in html
    # The lease clock, judged by the database's clock: seconds from expiry, never negative.
    assert re.search(r"expires in (2\d|30) s", html)
    assert "lapsed 1 min ago" in html
    assert "runnable" in html

    in_flight = page(client, IN_FLIGHT)
    assert result_ids(in_flight) == [live.id]
    assert result_ids(page(client, JOBS + "?lease=in_flight")) == [live.id]
    assert result_ids(page(client, JOBS + "?lease=lapsed")) == [lapsed.id]
    assert result_ids(page(client, JOBS + "?status__exact=queued")) == [queued.id]
    assert result_ids(page(client, JOBS + "?queue=mail")) == [queued.id]
    assert result_ids(page(client, JOBS + "?name=add")) == [done.id, lapsed.id, live.id,
                                                            queued.id]
    unregistered = make_job(alias, name="gone.after.deploy")
    # Search: an id exactly (with or without '#'), else part of a registered name, or a whole
    # name nobody registers any more.
    assert result_ids(page(client, JOBS + f"?q=%23{live.id}")) == [live.id]
    assert result_ids(page(client, JOBS + f"?q={done.id}")) == [done.id]
    assert result_ids(page(client, JOBS + "?q=AD")) == [done.id, lapsed.id, live.id, queued.id]
    assert result_ids(page(client, JOBS + "?q=gone.after.deploy")) == [unregistered.id]
    assert result_ids(page(client, JOBS + "?q=nothing-like-this")) == []


def test_job_detail_escapes_truncates_and_shows_history(alias: str, viewer) -> None:
    hostile = "<script>alert('pwned')</script>"
    job = add.enqueue(hostile, "x" * 50_000)
    Job.objects.using(alias).filter(id=job.id).update(
        status="failed", attempt=2, max_attempts=2,
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        last_error=f"Traceback (most recent call last):\n  File \"x.py\"\nValueError: {hostile}")
    JobAttempt.objects.using(alias).create(job_id=job.id, attempt=1, outcome="retrying",
                                           worker_id=WORKER_ID, error="boom <b>1</b>")
    JobAttempt.objects.using(alias).create(job_id=job.id, attempt=2, outcome="slot_lost",
                                           worker_id=WORKER_ID, slot_key="job:x", slot=0)
    JobStep.objects.using(alias).create(job_id=job.id, name="charge", result={"ok": hostile})

    html = page(client_for(viewer), reverse("admin:django_ultjobs_job_change", args=[job.id]))
    assert hostile not in html  # never rendered as markup, anywhere on the page
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in html
    assert "40,045 more characters not shown (50,045 in all" in html  # cut at 10,000
    assert "0af7651916cd43dd8448eb211c80319c" in html
    assert '<pre class="ultjobs-pre">Traceback (most recent call last):' in html
    # Attempts inline with their outcomes, and the steps; read-only, nothing to add.
    assert "retrying" in html and "slot lost" in html and "job:x[0]" in html
    assert "boom &lt;b&gt;1&lt;/b&gt;" in html and "charge" in html
    assert 'name="_save"' not in html and "View job" in html


def test_held_slots_show_holder_worker_and_job(alias: str, viewer) -> None:
    job = make_job(alias, status="running", worker_id=WORKER_ID)
    now = timezone.now()
    Slot.objects.using(alias).create(key="job:serial", slot=0,
                                         holder=f"{WORKER_ID}:{job.id}",
                                         expires_at=now + timedelta(seconds=20))
    Slot.objects.using(alias).create(key="job:serial", slot=1, holder="host-b:1:ffffff:999",
                                         expires_at=now - timedelta(seconds=90))
    client = client_for(viewer)
    html = page(client, SLOTS)
    job_url = reverse("admin:django_ultjobs_job_change", args=[job.id])
    worker_url = reverse("admin:django_ultjobs_worker_change", args=[quote(WORKER_ID)])
    assert f'<a href="{job_url}">#{job.id}</a>' in html
    assert f'<a href="{worker_url}">{WORKER_ID}</a>' in html
    assert re.search(r"in (1\d|20) s", html) and "2 min ago" in html
    assert html.count('<td class="field-lapsed">no</td>') == 1
    assert html.count("yes: free to take") == 1
    assert "host-b:1:ffffff:999" not in page(client, SLOTS + "?lapsed=no")
    assert "host-b:1:ffffff" in page(client, SLOTS + "?lapsed=yes")


def test_lost_slot_cancellations_say_what_happened_next(alias: str, viewer) -> None:
    recovered = make_job(alias, name="serial", status="succeeded", attempt=1)
    JobAttempt.objects.using(alias).create(job_id=recovered.id, attempt=1, outcome="slot_lost",
                                           worker_id=WORKER_ID, slot_key="job:serial", slot=0)
    JobAttempt.objects.using(alias).create(job_id=recovered.id, attempt=1, outcome="succeeded",
                                           worker_id="host-b:7:aaaaaa")
    waiting = make_job(alias, name="capped", status="queued")
    JobAttempt.objects.using(alias).create(job_id=waiting.id, attempt=1, outcome="slot_lost",
                                           worker_id=WORKER_ID, slot_key="job:capped", slot=1)
    failed = make_job(alias, status="failed")  # an attempt that is not a lost slot: not listed
    JobAttempt.objects.using(alias).create(job_id=failed.id, attempt=1, outcome="failed")

    html = page(client_for(viewer), LOST)
    assert "job:serial[0]" in html and "job:capped[1]" in html
    assert "job is <b>succeeded</b>; 1 later attempt, the next one succeeded" in html
    assert "job is <b>queued</b>; no attempt since" in html
    assert f"serial#{recovered.id}" in html
    assert html.count('class="field-when"') == 2


def test_workers_page_shows_the_fleet(alias: str, viewer) -> None:
    now = timezone.now()
    Worker.objects.using(alias).create(id=WORKER_ID, hostname="host-a", pid=4242, threads=8,
                                       queues=["default", "mail"], in_flight=3)
    Worker.objects.using(alias).create(id="host-b:1:bbbbbb", hostname="host-b", pid=1, threads=2,
                                       queues=["default"], stopped_at=now)
    Worker.objects.using(alias).create(id="host-c:1:cccccc", hostname="host-c", pid=1, threads=2,
                                       queues=["default"], last_seen_at=now - timedelta(days=3))
    html = page(client_for(viewer), WORKERS)
    assert "host-a" in html and "default, mail" in html and "running" in html
    assert "s ago" in html and "stopped" in html
    assert f"{IN_FLIGHT}?worker_id__exact=host-a%3A4242%3Aabc123" in html
    assert "host-c" not in html  # seen three days ago: not recent (the default window)
    assert "host-c" in page(client_for(viewer), WORKERS + "?seen=all")


def test_app_index_summary(alias: str, viewer) -> None:
    now = timezone.now()
    make_job(alias, queue="mail", visible_at=now - timedelta(minutes=3))
    make_job(alias, queue="mail", visible_at=now + timedelta(hours=1))
    make_job(alias, status="running", visible_at=now + timedelta(seconds=30))
    for _ in range(3):
        make_job(alias, status="succeeded")
    Slot.objects.using(alias).create(key="job:x", slot=0, holder="w:1",
                                         expires_at=now + timedelta(seconds=30))
    lost = make_job(alias, status="queued", visible_at=now + timedelta(hours=1))
    JobAttempt.objects.using(alias).create(job_id=lost.id, attempt=1, outcome="slot_lost")
    html = page(client_for(viewer), APP_INDEX)
    assert 'id="ultjobs-summary"' in html
    assert re.search(r'id="ultjobs-in-flight"><a href="[^"]+">1</a>', html)
    assert re.search(r'id="ultjobs-oldest">.*runnable for 3 min', html)
    assert re.search(r'data-status="succeeded"><a [^>]+>3</a>', html)
    assert re.search(r'data-status="queued"><a [^>]+>3</a>', html)
    assert re.search(r'id="ultjobs-slots"><a [^>]+>1</a>', html)
    assert re.search(r'id="ultjobs-lost"><a [^>]+>1</a>', html)
    # mail: 1 runnable, 1 delayed; default: 1 in flight, 1 delayed (the requeued lost slot).
    assert re.search(r">mail</a></th>\s*<td class=\"num\">1</td><td class=\"num\">1</td>", html)


def test_app_index_flags_queued_jobs_no_running_worker_knows(alias: str, viewer) -> None:
    # rule 12 (unknown-job-parked): each running worker lists the jobs it knows; a queued or waiting
    # job of a name none of them lists is flagged, linked to its jobs.
    now = timezone.now()
    Worker.objects.using(alias).create(id="w1", hostname="h", pid=1, threads=1,
                                       jobs=["add", "serial"])
    Worker.objects.using(alias).create(id="w2", hostname="h", pid=2, threads=1, jobs=["capped"])
    # Stopped, and not seen lately: what they knew does not count.
    Worker.objects.using(alias).create(id="w3", hostname="h", pid=3, threads=1,
                                       jobs=["gone_job"], stopped_at=now)
    Worker.objects.using(alias).create(id="w4", hostname="h", pid=4, threads=1,
                                       jobs=["gone_job"], last_seen_at=now - timedelta(days=1))
    for name, status in (("add", "queued"), ("capped", "waiting"), ("gone_job", "queued"),
                         ("gone_job", "queued"), ("<b>renamed</b>", "waiting"),
                         ("finished_gone", "succeeded"), ("running_gone", "running")):
        make_job(alias, name=name, status=status)
    html = page(client_for(viewer), APP_INDEX)
    flagged = re.search(r'id="ultjobs-unknown-jobs">(.*?)</td>', html, re.S)
    assert flagged is not None
    assert re.findall(r">([^<>]+)</a>", flagged[1]) == ["&lt;b&gt;renamed&lt;/b&gt;",
                                                        "gone_job"]
    assert f'href="{JOBS}?name=gone_job"' in flagged[1]
    # Once a running worker knows them, nothing is flagged.
    Worker.objects.using(alias).filter(id="w2").update(
        jobs=["capped", "gone_job", "<b>renamed</b>"])
    assert 'id="ultjobs-unknown-jobs"' not in page(client_for(viewer), APP_INDEX)


def test_a_park_episode_shows_its_claims_on_the_job_page(alias: str, viewer) -> None:
    # rule 12 (unknown-job-parked): one row for many parks, and how many.
    job = make_job(alias, name="gone_job")
    JobAttempt.objects.using(alias).create(job_id=job.id, attempt=1, outcome="suspended",
                                           claims=2880, error='no job registered as "gone_job"')
    html = page(client_for(viewer), reverse("admin:django_ultjobs_job_change", args=[job.id]))
    assert re.search(r'class="field-claims_count">\s*<p>2880</p>', html)


def test_app_index_flags_nothing_while_a_worker_has_not_said_what_it_knows(
        alias: str, viewer) -> None:
    # A worker of an older version (no list) may know anything: no flag is better than a
    # false one.
    Worker.objects.using(alias).create(id="w1", hostname="h", pid=1, threads=1, jobs=["add"])
    Worker.objects.using(alias).create(id="w2", hostname="h", pid=2, threads=1, jobs=None)
    make_job(alias, name="gone_job")
    assert 'id="ultjobs-unknown-jobs"' not in page(client_for(viewer), APP_INDEX)


def test_no_add_and_no_delete_anywhere(alias: str, operator) -> None:
    job = make_job(alias)
    client = client_for(operator)
    for model in ("job", "inflightjob", "heldslot", "lostslotcancellation", "worker"):
        assert client.get(reverse(f"admin:django_ultjobs_{model}_add")).status_code == 403
    assert client.get(reverse("admin:django_ultjobs_job_delete",
                              args=[job.id])).status_code == 403
    html = page(client, JOBS)
    assert "addlink" not in html and "delete_selected" not in html


def test_held_slots_of_a_cap_per_key_show_the_key_the_cap_and_its_waiting_runs(
        alias: str, viewer) -> None:  # rule 50 (per-key-cap)
    key = keyed_slot_key("keyed_clocked", "acme")
    running = make_job(alias, name="keyed_clocked", status="running", worker_id=WORKER_ID,
                       concurrency_key=key)
    for _ in range(3):
        make_job(alias, name="keyed_clocked", status="queued", concurrency_key=key)
    make_job(alias, name="keyed_clocked", status="queued",
             concurrency_key=keyed_slot_key("keyed_clocked", "bolt"))
    Slot.objects.using(alias).create(key=key, slot=0, holder=f"{WORKER_ID}:{running.id}",
                                     expires_at=timezone.now() + timedelta(seconds=20))
    html = page(client_for(viewer), SLOTS)
    assert "keyed_clocked, key acme" in html
    assert '<td class="field-cap">1 per key</td>' in html
    assert re.search(r'<td class="field-runs_waiting"><a href="[^"]+">3</a></td>', html)


def test_job_detail_shows_the_unique_key_a_job_holds(alias: str, viewer) -> None:
    # rule 66 (held-key-returns-holder): why an enqueue returned this job instead of a new one.
    keyed = add.using(unique_key="invoice:<42>").enqueue(1, 2)
    plain = add.enqueue(1, 2)
    html = page(client_for(viewer), reverse("admin:django_ultjobs_job_change", args=[keyed.id]))
    assert "Unique key" in html and "invoice:&lt;42&gt;" in html
    html = page(client_for(viewer), reverse("admin:django_ultjobs_job_change", args=[plain.id]))
    assert "Unique key" not in html
