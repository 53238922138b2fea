"""The attempt a job's row holds (rule 97 (attempt-on-row)) in the admin, on SQLite and PostgreSQL:
a job whose first attempt succeeded, run through the real claim and settle, shows that attempt on
its page, in the charts and on the lost-slot page as if it had a row of its own."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from django_ultjobs.admin import charts
from django_ultjobs.admin.charts import SPANS, bucket_floor, job_charts
from django_ultjobs.models import Job, JobAttempt
from django_ultjobs.store import Settlement, get_store
from tests.admin.conftest import LOST, client_for, page

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

WORKER_ID = "host-a:4242:abc123"


def _run(alias: str, outcome: Settlement | None = None, **fields: object) -> Job:
    """Enqueue, claim and settle one job as a worker does; a plain success by default."""
    store = get_store(alias)
    job = Job.objects.using(alias).create(name="add", **fields)
    (claimed,) = store.claim(worker_id=WORKER_ID, queues=["default"], limit=1,
                             visibility_timeout=30.0, caps={})
    assert claimed.id == job.id
    settled = Settlement(job_id=job.id, token=claimed.token, status="succeeded",
                         attempt_no=claimed.attempt, started_at=claimed.claimed_at,
                         outcome="succeeded", result_json="5")
    assert store.settle([settled], WORKER_ID) == {job.id}
    return Job.objects.using(alias).get(id=job.id)


def test_the_job_page_lists_the_attempt_its_row_holds(alias: str, viewer) -> None:
    job = _run(alias)
    assert not JobAttempt.objects.using(alias).filter(job_id=job.id).exists()
    html = page(client_for(viewer), reverse("admin:django_ultjobs_job_change", args=[job.id]))
    group = html[html.index('id="attempts-group"'):]
    group = re.sub(r">\s+<", "><", group[:group.index("</table>")])
    assert re.findall(r'<td class="field-outcome_display"><p>(\w+)</p>', group) == ["succeeded"]
    assert f'<td class="field-worker_id"><p>{WORKER_ID}</p></td>' in group
    assert '<td class="field-attempt"><p>1</p></td>' in group


def test_the_charts_count_and_time_the_attempts_the_rows_hold(alias: str) -> None:
    job = _run(alias)
    charts = job_charts(alias, SPANS["1h"])
    assert charts.throughput.total == 1
    assert charts.throughput.outcomes == ["succeeded"]
    assert [(t.name, t.runs) for t in charts.durations.names] == [(job.name, 1)]


def test_a_success_after_a_lost_slot_is_the_next_attempt_shown(alias: str, viewer) -> None:
    job = Job.objects.using(alias).create(name="serial")
    JobAttempt.objects.using(alias).create(job_id=job.id, attempt=1, outcome="slot_lost",
                                           worker_id=WORKER_ID, slot_key="job:serial", slot=0)
    store = get_store(alias)
    (claimed,) = store.claim(worker_id=WORKER_ID, queues=["default"], limit=1,
                             visibility_timeout=30.0, caps={})
    # The lost slot handed the attempt back: this run is attempt 1 again, and succeeds plainly.
    assert claimed.attempt == 1
    settled = Settlement(job_id=job.id, token=claimed.token, status="succeeded", attempt_no=1,
                         started_at=claimed.claimed_at, outcome="succeeded")
    assert store.settle([settled], WORKER_ID) == {job.id}
    assert JobAttempt.objects.using(alias).filter(job_id=job.id).count() == 1
    html = page(client_for(viewer), LOST)
    assert "job is <b>succeeded</b>; 1 later attempt, the next one succeeded" in html


def test_over_the_cap_the_attempts_the_rows_hold_are_cut_too(alias: str, monkeypatch) -> None:
    """rules 80 (bounded-charts), 97 (attempt-on-row): the attempts the jobs' rows hold are read a
    bounded number at a time, and the chart says from when it counted, as for attempt rows."""
    monkeypatch.setattr(charts, "MAX_ATTEMPTS_READ", 3)
    minute = bucket_floor(get_store(alias).db_now(), 60)
    for back in (0, 0, 1, 1, 2, 5):
        finished = minute - timedelta(minutes=back)
        Job.objects.using(alias).create(name="add", status="succeeded", attempt=1,
                                        worker_id=WORKER_ID, attempt_on_row=True,
                                        claimed_at=finished - timedelta(seconds=1),
                                        finished_at=finished)
    figures = job_charts(alias, SPANS["1h"]).throughput
    # The 4th newest finished a minute back: that bucket is cut, the ones after are whole.
    assert figures.counted_from == minute
    assert [b.counts for b in figures.buckets[-3:]] == [None, None, {"succeeded": 2}]
