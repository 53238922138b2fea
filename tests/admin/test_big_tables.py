"""No page counts the whole jobs table: the big-table rules, proved on a small table.

The figures at a million rows come from ``benchmarks/admin_big_table.py`` (docs/admin.md). Here
the paginator's cap is lowered to 10, so 30 rows are "big", and every query each page runs is
captured: no COUNT of the jobs table may go unbounded, and past the cap the page says "about"
(PostgreSQL's planner estimate) or "more than 10" (SQLite, which has no planner estimate).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

from django_ultjobs.admin import summary
from django_ultjobs.admin.paginator import EstimatedCountPaginator
from django_ultjobs.models import Job
from tests.admin.conftest import APP_INDEX, IN_FLIGHT, JOBS, client_for

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

COUNT_OF_JOBS = re.compile(r'COUNT\(.*FROM "django_ultjobs_job"', re.S | re.I)
LIVE_ONLY = re.compile(r"\"status\" IN \('queued', 'running', 'waiting'\)")


@pytest.fixture
def small_cap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(EstimatedCountPaginator, "exact_up_to", 10)
    # The summary's finished counts on SQLite, where no planner estimates them.
    monkeypatch.setattr(summary, "LIVE_COUNT_CAP", 10)
    yield


def fill(alias: str, n: int = 30) -> None:
    later = timezone.now() + timedelta(minutes=5)
    Job.objects.using(alias).bulk_create(
        [Job(name="add", status="succeeded") for _ in range(n)]
        + [Job(name="add", status="running", visible_at=later) for _ in range(3)])
    if connections[alias].vendor == "postgresql":
        with connections[alias].cursor() as cur:
            cur.execute("ANALYZE django_ultjobs_job")  # the planner's statistics, as autovacuum


def counts_of_jobs(client, alias: str, url: str) -> tuple[str, list[str]]:
    with CaptureQueriesContext(connections[alias]) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return response.content.decode(), [
        q["sql"] for q in captured.captured_queries if COUNT_OF_JOBS.search(q["sql"])]


def test_changelists_never_count_the_whole_table(alias: str, viewer, small_cap) -> None:
    fill(alias)
    client = client_for(viewer)
    for url in (JOBS, JOBS + "?status__exact=succeeded", JOBS + "?name=add", IN_FLIGHT,
                JOBS + "?lease=in_flight", JOBS + "?q=add"):
        _, counts = counts_of_jobs(client, alias, url)
        unbounded = [sql for sql in counts if "LIMIT" not in sql.upper()]
        assert unbounded == [], (url, unbounded)


def test_past_the_cap_the_count_is_an_estimate(alias: str, viewer, small_cap) -> None:
    fill(alias)
    client = client_for(viewer)
    html, counts = counts_of_jobs(client, alias, JOBS)
    if connections[alias].vendor == "postgresql":
        # The planner's estimate (33 rows, from ANALYZE); no count query at all.
        assert counts == []
        assert re.search(r'>about 33</span> jobs', html)
    else:
        assert len(counts) == 1 and "LIMIT 11" in counts[0]
        assert re.search(r'>more than 10</span> jobs', html)
    # A small result is counted exactly, as ever.
    html, _ = counts_of_jobs(client, alias, IN_FLIGHT)
    assert re.search(r"\b3 in-flight jobs", html)


def test_app_index_summary_counts_only_live_rows(alias: str, viewer, small_cap) -> None:
    fill(alias)
    html, counts = counts_of_jobs(client_for(viewer), alias, APP_INDEX)
    for sql in counts:
        # A capped count; the settling runs' count reads running rows with a live lease alone.
        assert "LIMIT" in sql.upper() or "\"status\" = 'running'" in sql, sql
    shown = re.search(r'data-status="succeeded"><a [^>]+>(.*?)</a>', html).group(1)
    assert ("≈ 30" in shown) if connections[alias].vendor == "postgresql" else ("&gt; 10" in shown)


def test_app_index_counts_finished_jobs_by_name_on_sqlite(
        viewer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 120 (bounded-live-stats): with no planner to estimate them, each finished status is
    one capped range of the name and status index per job name, never a read of every row (a
    rare status among a backlog of queued jobs read the whole index)."""
    monkeypatch.setattr(summary, "LIVE_COUNT_CAP", 5)
    alias = "default"
    Job.objects.using(alias).bulk_create(
        [Job(name=name, status="succeeded") for name in ("a", "b") for _ in range(4)]
        + [Job(name="a", status="failed") for _ in range(2)] + [Job(name="c") for _ in range(9)])
    with override_settings(ULTJOBS={"DATABASE": alias}), \
            CaptureQueriesContext(connections[alias]) as captured:
        html = client_for(viewer).get(APP_INDEX).content.decode()
    shown = {status: re.search(rf'data-status="{status}"><a [^>]+>(.*?)</a>', html).group(1)
             for status in ("succeeded", "failed", "cancelled")}
    # 4 + 4: exact, though more than the cap, as no name's range reached it.
    assert shown == {"succeeded": "8", "failed": "2", "cancelled": "0"}
    assert [q for q in captured.captured_queries if "django_ultjobs:finished_counts" in q["sql"]]
    Job.objects.using(alias).bulk_create(Job(name="b", status="succeeded") for _ in range(3))
    html = client_for(viewer).get(APP_INDEX).content.decode()
    assert "&gt; 5" in re.search(r'data-status="succeeded"><a [^>]+>(.*?)</a>', html).group(1)


def test_app_index_summary_stops_each_live_count_at_the_cap(
        alias: str, viewer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 120 (bounded-live-stats): a backlog past the cap is "more than", read as one
    statement of capped ranges, never a count of every live row."""
    monkeypatch.setattr(summary, "LIVE_COUNT_CAP", 5)
    due = timezone.now() - timedelta(minutes=1)
    Job.objects.using(alias).bulk_create(
        [Job(name="add", visible_at=due) for _ in range(12)]
        + [Job(name="add", status="running", visible_at=due + timedelta(hours=1))
           for _ in range(2)])
    with CaptureQueriesContext(connections[alias]) as captured:
        html = client_for(viewer).get(APP_INDEX).content.decode()
    statements = [q["sql"] for q in captured.captured_queries]
    live = [sql for sql in statements if "django_ultjobs:live_stats" in sql]
    assert len(live) == 1 and "LIMIT" in live[0]
    grouped = [sql for sql in statements if COUNT_OF_JOBS.search(sql) and "GROUP BY" in sql
               and "\"status\" = 'running'" not in sql]
    assert grouped == []
    # The queue-age chart: the first entry of each queue's ranges, not a MIN over every due job.
    assert not [sql for sql in statements if "MIN(" in sql.upper() and "GROUP BY" in sql
                and '"django_ultjobs_job"' in sql]
    assert any("django_ultjobs:live_oldest" in sql for sql in statements)
    queued = re.search(r'data-status="queued"><a [^>]+>(.*?)</a>', html).group(1)
    running = re.search(r'data-status="running"><a [^>]+>(.*?)</a>', html).group(1)
    assert "&gt; 5" in queued and running.strip() == "2"
    row = re.search(r'<th scope="row"><a [^>]+>default</a></th>(.*?)</tr>', html, re.S).group(1)
    cells = re.findall(r'<td class="num">(.*?)</td>', row)
    assert "&gt; 5" in cells[0] and cells[2] == "2"


def test_a_big_tables_finished_statuses_are_estimated_not_scanned(
        pg_alias: str, viewer, monkeypatch: pytest.MonkeyPatch) -> None:
    """No index leads with the status: on a big table even a rare finished status is the
    planner's estimate, never a count that reads the table."""
    monkeypatch.setattr(summary, "ESTIMATE_PAST", 10)
    fill(pg_alias)
    Job.objects.using(pg_alias).create(name="add", status="cancelled")
    html, counts = counts_of_jobs(client_for(viewer), pg_alias, APP_INDEX)
    assert not [sql for sql in counts if re.search(r"\"status\" = '(cancelled|failed|succeeded)'",
                                                   sql)], counts
    shown = re.search(r'data-status="succeeded"><a [^>]+>(.*?)</a>', html).group(1)
    assert "≈" in shown


def test_a_failed_or_cancelled_filter_reads_the_status_index(alias: str, viewer) -> None:
    """The jobs list filtered by failed or cancelled states the status index's predicate on
    SQLite, so it reads that index in id order (PostgreSQL infers it): no backward walk of the
    primary key past every newer job of another status. The rows are the same."""
    sqlite = connections[alias].vendor == "sqlite"
    later = timezone.now() + timedelta(minutes=5)
    made = Job.objects.using(alias).bulk_create(
        [Job(name="add", status=status, finished_at=timezone.now())
         for status in ("failed", "cancelled", "succeeded") * 3]
        + [Job(name="add", visible_at=later) for _ in range(4)])
    client = client_for(viewer)
    for status in ("failed", "cancelled", "succeeded", "queued"):
        expected = sorted((j.pk for j in made if j.status == status), reverse=True)
        with CaptureQueriesContext(connections[alias]) as captured:
            html = client.get(f"{JOBS}?status__exact={status}").content.decode()
        shown = [int(i) for i in re.findall(r'<a href="[^"]*/job/(\d+)/change/">', html)]
        assert shown == expected, status
        [page] = [q["sql"] for q in captured.captured_queries
                  if 'FROM "django_ultjobs_job"' in q["sql"] and "ORDER BY" in q["sql"]
                  and "COUNT(" not in q["sql"].upper()]
        states = "\"status\" IN ('failed', 'cancelled')" in page
        assert states == (sqlite and status in ("failed", "cancelled")), (status, page)
        if states:
            with connections[alias].cursor() as cur:
                cur.execute(f"EXPLAIN QUERY PLAN {page}")
                plan = " ".join(row[-1] for row in cur.fetchall())
            assert "ultjobs_job_status" in plan, plan
