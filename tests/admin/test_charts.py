"""The admin's charts, on SQLite and PostgreSQL: known attempts in, known bars and percentiles out.

Rule 80 (bounded-charts): the figures come from bounded, indexed reads of the attempts table.
Rule 81 (svg-charts): every chart carries its numbers as text. Rule 82 (fixed-query-summary): the
summary's queries are a fixed number, whatever the tables hold.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from django_ultjobs.admin import charts
from django_ultjobs.admin.charts import SPANS, bucket_floor, job_charts
from django_ultjobs.models import Job, JobAttempt
from django_ultjobs.store import get_store

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def _attempt(alias: str, job: Job, outcome: str, finished, took: float | None = 1.0,
             attempt: int = 1) -> JobAttempt:
    started = None if took is None else finished - timedelta(seconds=took)
    return JobAttempt.objects.using(alias).create(job=job, attempt=attempt, outcome=outcome,
                                                  started_at=started, finished_at=finished)


def _now(alias: str):
    return get_store(alias).db_now()


def test_runs_finished_per_minute_by_outcome(alias: str) -> None:
    """rule 80 (bounded-charts)"""
    now = _now(alias)
    if now.second >= 50:
        # The chart reads the clock again: start the test far from a minute's end, so both
        # reads fall in the same minute and the bars are where the test put them.
        time.sleep(61 - now.second)
        now = _now(alias)
    minute = bucket_floor(now, 60)
    job = Job.objects.using(alias).create(name="add", status="succeeded")
    other = Job.objects.using(alias).create(name="mail", status="failed")
    # This minute: 3 succeeded, 1 retrying; two minutes ago: 2 failed (of "mail"); 59 minutes
    # ago (the first bar): 1 cancelled; an hour and more ago: nothing shown.
    for _ in range(3):
        _attempt(alias, job, "succeeded", minute + timedelta(seconds=1))
    _attempt(alias, job, "retrying", minute)
    _attempt(alias, other, "failed", minute - timedelta(seconds=90))
    _attempt(alias, other, "failed", minute - timedelta(seconds=61))
    _attempt(alias, job, "cancelled", minute - timedelta(minutes=59))
    _attempt(alias, job, "succeeded", minute - timedelta(minutes=60, seconds=1))

    figures = job_charts(alias, SPANS["1h"])
    bars = figures.throughput.buckets
    assert len(bars) == 60 and bars[-1].start == minute
    assert bars[-1].counts == {"succeeded": 3, "retrying": 1}
    assert bars[-3].counts == {"failed": 2}
    assert bars[0].counts == {"cancelled": 1}
    assert sum(b.total for b in bars) == 7 == figures.throughput.total
    assert figures.throughput.outcomes == ["succeeded", "retrying", "failed", "cancelled"]
    assert figures.throughput.counted_from is None

    # One job name's chart counts only its runs.
    mail = job_charts(alias, SPANS["1h"], name="mail").throughput
    assert [b.total for b in mail.buckets if b.total] == [2] and mail.outcomes == ["failed"]

    # The day: 96 bars of 15 minutes; every attempt above lands in the last one or two.
    day = job_charts(alias, SPANS["24h"]).throughput
    assert len(day.buckets) == 96 and day.total == 8


def test_over_the_cap_whole_buckets_after_the_cut_are_counted(alias: str, monkeypatch) -> None:
    """rule 80 (bounded-charts): a chart reads a bounded number of attempts and says from when it
    counted."""
    monkeypatch.setattr(charts, "MAX_ATTEMPTS_READ", 3)
    now = _now(alias)
    minute = bucket_floor(now, 60)
    job = Job.objects.using(alias).create(name="add", status="succeeded")
    for back in (0, 0, 1, 1, 2, 5):
        _attempt(alias, job, "succeeded", minute - timedelta(minutes=back))
    figures = job_charts(alias, SPANS["1h"]).throughput
    # The 4th newest finished a minute back: that bucket is cut, the ones after are whole.
    assert figures.counted_from == minute
    assert [b.counts for b in figures.buckets[-3:]] == [None, None, {"succeeded": 2}]


def test_duration_percentiles_per_job_name(alias: str) -> None:
    """rule 80 (bounded-charts): nearest-rank p50 and p95, the same on both engines."""
    now = _now(alias)
    add = Job.objects.using(alias).create(name="add", status="succeeded")
    report = Job.objects.using(alias).create(name="report", status="succeeded")
    # "add": 20 runs of 1..20 s, so p50 is the 10th (10 s) and p95 the 19th (19 s).
    for seconds in range(20, 0, -1):
        _attempt(alias, add, "succeeded", now - timedelta(seconds=seconds), took=seconds)
    # "report": three runs (0.25, 2, 60 s): p50 the 2nd, p95 the 3rd. A cancelled run and one
    # that never started (a lost lease recorded by another worker) are not timed.
    for took, outcome in ((2.0, "failed"), (60.0, "succeeded"), (0.25, "retrying")):
        _attempt(alias, report, outcome, now - timedelta(seconds=5), took=took)
    _attempt(alias, report, "cancelled", now - timedelta(seconds=5), took=999)
    _attempt(alias, report, "lease_lost", now - timedelta(seconds=5), took=None)
    _attempt(alias, report, "succeeded", now - timedelta(hours=2), took=999)  # outside

    timed = job_charts(alias, SPANS["1h"]).durations
    assert [(t.name, t.runs, t.p50, t.p95) for t in timed.names] == [
        ("report", 3, 2.0, 60.0), ("add", 20, 10.0, 19.0)]
    assert timed.more == 0 and timed.timed_from is None
    only = job_charts(alias, SPANS["1h"], name="add").durations
    assert [(t.name, t.p50, t.p95) for t in only.names] == [("add", 10.0, 19.0)]


def test_one_run_is_its_own_p50_and_p95(alias: str) -> None:
    now = _now(alias)
    job = Job.objects.using(alias).create(name="add", status="succeeded")
    _attempt(alias, job, "succeeded", now - timedelta(seconds=1), took=0.5)
    [only] = job_charts(alias, SPANS["1h"]).durations.names
    assert (only.runs, only.p50, only.p95) == (1, 0.5, 0.5)


def test_oldest_runnable_age_per_queue(alias: str) -> None:
    now = _now(alias)
    jobs = Job.objects.using(alias)
    jobs.create(name="add", queue="default", visible_at=now - timedelta(minutes=5))
    jobs.create(name="add", queue="default", visible_at=now - timedelta(minutes=1))
    jobs.create(name="mail", queue="mail", visible_at=now - timedelta(minutes=10))
    jobs.create(name="mail", queue="later", visible_at=now + timedelta(minutes=10))  # not due
    jobs.create(name="add", queue="done", status="succeeded",
                visible_at=now - timedelta(days=1))
    ages = job_charts(alias, SPANS["1h"]).queue_ages
    assert [a.queue for a in ages] == ["mail", "default"]
    assert 595 <= ages[0].seconds <= 660 and 295 <= ages[1].seconds <= 360
    assert [a.queue for a in job_charts(alias, SPANS["1h"], name="add").queue_ages] == [
        "default"]


def test_a_job_names_queue_ages_read_the_first_entry_of_that_name(alias: str) -> None:
    """Rule 120 (bounded-live-stats): a job name's page finds each queue's longest-due job of
    that name behind other names' due jobs, lapsed running ones too, by the first entry of that
    name in each range of the live index, not a MIN over every due job."""
    now = _now(alias)
    jobs = Job.objects.using(alias)
    jobs.bulk_create(Job(name="other", queue="default", visible_at=now - timedelta(minutes=30))
                     for _ in range(5))
    jobs.create(name="add", queue="default", visible_at=now - timedelta(minutes=4))
    jobs.create(name="add", queue="default", visible_at=now - timedelta(minutes=2))
    jobs.create(name="add", queue="mail", status="running",
                visible_at=now - timedelta(minutes=7))  # lapsed: due again
    jobs.create(name="add", queue="later", visible_at=now + timedelta(minutes=5))  # not due
    jobs.create(name="add", queue="done", status="failed", visible_at=now - timedelta(days=1))
    with CaptureQueriesContext(connections[alias]) as captured:
        ages = job_charts(alias, SPANS["1h"], name="add").queue_ages
    assert [a.queue for a in ages] == ["mail", "default"]
    assert 415 <= ages[0].seconds <= 480 and 235 <= ages[1].seconds <= 300
    statements = [q["sql"] for q in captured.captured_queries]
    assert any("django_ultjobs:live_oldest_named" in sql for sql in statements)
    assert not [sql for sql in statements if "MIN(" in sql.upper() and "GROUP BY" in sql]
    assert job_charts(alias, SPANS["1h"], name="absent").queue_ages == []


def test_the_charts_run_without_postgresqls_jit_compiler(alias: str) -> None:
    """The durations' statement is costed past ``jit_above_cost`` at a few thousand runs, and
    compiling it cost more than running it: the charts' statements run with JIT off, and the
    caller's transaction gets its setting back."""
    if connections[alias].vendor != "postgresql":
        pytest.skip("PostgreSQL's JIT compiler")
    with CaptureQueriesContext(connections[alias]) as captured:
        job_charts(alias, SPANS["1h"])
    statements = [q["sql"] for q in captured.captured_queries]
    off = next(i for i, sql in enumerate(statements) if "set_config('jit', 'off', true)" in sql)
    assert any("ROW_NUMBER() OVER" in sql for sql in statements[off:])
    with connections[alias].cursor() as cur:
        cur.execute("SHOW jit")
        before = cur.fetchone()[0]
        with transaction.atomic(using=alias):
            job_charts(alias, SPANS["1h"])
            cur.execute("SHOW jit")
            assert cur.fetchone()[0] == before


def test_a_span_is_picked_by_name_and_anything_else_is_the_hour() -> None:
    assert charts.span_of("24h") is SPANS["24h"]
    for value in (None, "", "2h", ["24h"], "24H"):
        assert charts.span_of(value) is SPANS["1h"]


# -- the pages -----------------------------------------------------------------------------------

import re  # noqa: E402

from tests.admin.conftest import APP_INDEX, IN_FLIGHT, JOBS, SLOTS, client_for, page  # noqa: E402


def _some_history(alias: str, runs: int) -> None:
    now = _now(alias)
    job = Job.objects.using(alias).create(name="add", status="succeeded")
    JobAttempt.objects.using(alias).bulk_create(
        JobAttempt(job=job, attempt=1, outcome="succeeded" if i % 7 else "failed",
                   started_at=now - timedelta(seconds=i % 3000 + 2),
                   finished_at=now - timedelta(seconds=i % 3000))
        for i in range(runs))
    Job.objects.using(alias).create(name="add", queue="mail",
                                    visible_at=now - timedelta(minutes=3))


def _charts_html(html: str) -> str:
    start = html.index('id="ultjobs-charts"')
    return html[start:html.index('<div class="app-django_ultjobs', start)]


def test_every_chart_has_a_text_alternative(alias: str, viewer) -> None:
    """rule 81 (svg-charts): role img, a title and a description with the numbers, and the
    tables."""
    _some_history(alias, 70)
    html = page(client_for(viewer), APP_INDEX)
    charts_html = _charts_html(html)
    svgs = re.findall(r"<svg class=\"ultjobs-chart\"[^>]*>.*?</svg>", charts_html, re.S)
    assert len(svgs) == 3
    for svg in svgs:
        assert 'role="img"' in svg
        ids = re.search(r'aria-labelledby="([^"]+)"', svg).group(1).split()
        for ident in ids:
            assert re.search(rf'<(title|desc) id="{ident}">[^<]+</\1>', svg), (ident, svg[:300])
    descs = re.findall(r"<desc [^>]*>([^<]+)</desc>", charts_html)
    assert "70 runs finished in the last hour (60 succeeded, 10 failed)" in descs[0]
    assert descs[1].startswith("add: p50 2.0 s, p95 2.0 s")
    assert descs[2] == "mail: 3 min"
    # The numbers as tables, and nothing a strict Content-Security-Policy refuses.
    assert charts_html.count('<table class="ultjobs-numbers">') == 3
    assert "<script" not in charts_html and "style=" not in charts_html


def test_a_name_filtered_list_charts_that_name_and_the_window_switches(alias: str,
                                                                      viewer) -> None:
    _some_history(alias, 10)
    client = client_for(viewer)
    html = page(client, f"{JOBS}?name=add&charts=24h")
    assert "Runs of add, last 24 hours" in html
    assert "Runs finished per 15 minutes, by outcome" in html
    assert 'href="?name=add&amp;charts=1h"' in html  # the switch keeps the filter
    # The rows are still the list's: the chart's parameter is not taken for a field filter.
    assert 'class="field-job_id"' in html
    assert "ultjobs-charts" not in page(client, JOBS)
    assert "Runs, last 24 hours" in page(client, f"{APP_INDEX}?charts=24h")
    assert "Runs, last hour" in page(client, f"{APP_INDEX}?charts=bogus")


def test_the_summary_reads_a_fixed_number_of_queries(alias: str, viewer) -> None:
    """rule 82 (fixed-query-summary): the app index's queries do not grow with the rows, nor with
    the window."""
    client = client_for(viewer)

    def queries(url: str) -> int:
        with CaptureQueriesContext(connections[alias]) as captured:
            page(client, url)
        # The jobs tables' queries only: on SQLite the session and the user share the database.
        return len([q for q in captured if "django_ultjobs_" in q["sql"]])

    _some_history(alias, 5)
    few, few_day = queries(APP_INDEX), queries(f"{APP_INDEX}?charts=24h")
    _some_history(alias, 500)
    assert queries(APP_INDEX) == few and queries(f"{APP_INDEX}?charts=24h") == few_day
    # The summary's (more on PostgreSQL, where the planner is asked the table's size and a
    # finished status's count; one for the paused queues; two for the runs settling,
    # rule 91 (settling-shown)) and the charts' seven: two bounded cuts of each table (the attempt
    # rows, and the attempts the jobs' rows hold, rule 97 (attempt-on-row)), two reads, the queue
    # ages.
    assert few <= 22, few


def test_auto_refresh_is_off_until_asked_and_only_on_the_live_pages(alias: str,
                                                                    viewer) -> None:
    """rule 83 (refresh-on-request)"""
    client = client_for(viewer)
    meta = '<meta http-equiv="refresh" content="30">'
    for url in (APP_INDEX, IN_FLIGHT, SLOTS):
        assert "http-equiv=\"refresh\"" not in page(client, url)
        html = page(client, f"{url}?refresh=30")
        assert meta in html and "<strong aria-current=\"true\">30 s</strong>" in html, url
        assert "http-equiv=\"refresh\"" not in page(client, f"{url}?refresh=1"), url
    # The jobs list (actions, selections) never reloads under the operator, and does not
    # answer the parameter with Django's "?e=1" either.
    response = client.get(f"{JOBS}?refresh=30")
    assert response.status_code == 200 and "http-equiv=\"refresh\"" not in response.content.decode()
