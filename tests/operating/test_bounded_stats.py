"""``ultjobs stats`` and the queue gauges count with bounded work, on both engines: each figure
read up to a cap and said to be a lower bound past it, the same statements for a few jobs as for
many, and the plans reading the partial indexes (rule 120 (bounded-live-stats))."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from django_ultjobs.admin import summary
from django_ultjobs.management import reports
from django_ultjobs.models import Job
from django_ultjobs.store import get_store

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def add(alias: str, n: int, *, status: str = "queued", queue: str = "default",
        due_in: float = -60.0, finished_ago: float | None = None) -> None:
    """``n`` jobs of ``status`` due ``due_in`` seconds from now; finished ``finished_ago``
    seconds ago when given."""
    now = get_store(alias).db_now()
    finished = None if finished_ago is None else now - timedelta(seconds=finished_ago)
    Job.objects.using(alias).bulk_create(
        Job(name="add", queue=queue, status=status, visible_at=now + timedelta(seconds=due_in),
            finished_at=finished) for _ in range(n))


def cli_stats(alias: str) -> dict[str, dict[str, Any]]:
    out = io.StringIO()
    call_command("ultjobs", "stats", "--json", "--database", alias, stdout=out)
    return {q["queue"]: q for q in json.loads(out.getvalue())["queues"]}


def test_cli_stats_counts_pending_and_recent_failures(alias: str) -> None:
    add(alias, 2)
    add(alias, 3, status="pending")
    add(alias, 1, status="pending", queue="later")            # pending alone: still listed
    add(alias, 2, status="failed", finished_ago=60)
    add(alias, 4, status="failed", finished_ago=7200)          # before the last hour
    add(alias, 1, status="failed", queue="old", finished_ago=60)
    queues = cli_stats(alias)
    assert (queues["default"]["runnable"], queues["default"]["pending"],
            queues["default"]["failed_last_hour"]) == (2, 3, 2)
    assert queues["later"]["pending"] == 1 and queues["old"]["failed_last_hour"] == 1
    assert all(q["more_than"] == [] for q in queues.values())


def test_cli_stats_stops_each_count_at_the_cap_and_says_so(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary, "LIVE_COUNT_CAP", 3)
    monkeypatch.setattr(reports, "LIVE_COUNT_CAP", 3)
    add(alias, 6)
    add(alias, 2, due_in=60)
    add(alias, 5, status="pending")
    add(alias, 5, status="failed", finished_ago=10)
    default = cli_stats(alias)["default"]
    assert (default["runnable"], default["delayed"], default["pending"],
            default["failed_last_hour"]) == (4, 2, 4, 4)
    assert default["more_than"] == ["failed_last_hour", "pending", "runnable"]
    out = io.StringIO()
    call_command("ultjobs", "stats", "--database", alias, stdout=out)
    row = next(line for line in out.getvalue().splitlines() if line.startswith("default"))
    assert row.split()[2:8] == [">3", "2", "0", "0", ">3", ">3"]


def statements(alias: str, call: Any) -> list[str]:
    with CaptureQueriesContext(connections[alias]) as captured:
        call()
    return [q["sql"] for q in captured.captured_queries]


def test_cli_stats_runs_the_same_statements_whatever_the_tables_hold(alias: str) -> None:
    add(alias, 1)
    few = statements(alias, lambda: cli_stats(alias))
    for q in range(5):
        add(alias, 30, queue=f"q{q}")
        add(alias, 10, queue=f"q{q}", status="pending")
        add(alias, 10, queue=f"q{q}", status="failed", finished_ago=30)
        add(alias, 10, queue=f"q{q}", status="succeeded", finished_ago=30)
    many = statements(alias, lambda: cli_stats(alias))
    assert len(many) == len(few)
    # No count of the jobs table but the capped ranges: a grouped count (COUNT over every
    # matching row) is gone.
    assert not [sql for sql in many if re.search(r'COUNT\("django_ultjobs_job"', sql)], many


def test_the_depth_gauge_stops_at_its_cap_per_status(alias: str) -> None:
    store = get_store(alias)
    add(alias, 7, due_in=-120)
    add(alias, 2, status="running", due_in=-5)     # lapsed leases: runnable again
    add(alias, 3, due_in=600)                      # not due: not counted
    add(alias, 4, queue="mail")
    add(alias, 2, status="pending", queue="wf")    # pending alone: no depth, no row
    queues, _ = store.gauge_rows(5)
    by_queue = {q: (depth, age) for q, depth, age in queues}
    assert set(by_queue) == {"default", "mail"}
    assert by_queue["default"][0] == 5 + 2 and by_queue["mail"][0] == 4
    assert 110 < by_queue["default"][1] < 200
    queues, _ = store.gauge_rows(1_000)
    assert {q: d for q, d, _ in queues} == {"default": 9, "mail": 4}


def test_the_gauges_run_two_statements_whatever_the_backlog(alias: str) -> None:
    store = get_store(alias)
    add(alias, 1)
    few = statements(alias, lambda: store.gauge_rows(10))
    for q in range(5):
        add(alias, 40, queue=f"q{q}")
    assert len(statements(alias, lambda: store.gauge_rows(10))) == len(few) == 2


def test_the_capped_counts_read_the_partial_indexes(alias: str) -> None:
    """Failed, pending and gauge counts are ranges of their partial indexes on a table where
    most rows are finished."""
    for q in ("default", "mail"):
        add(alias, 200, queue=q)
        add(alias, 100, queue=q, status="pending")
        add(alias, 100, queue=q, status="failed", finished_ago=30)
    add(alias, 3000, status="succeeded", finished_ago=30)
    store = get_store(alias)
    checks = {
        "failed_recent": ({"now": None, "seconds": 3600.0, "limit": 10}, "ultjobs_job_failed"),
        "gauge_queues": ({"now": None, "limit": 10}, "ultjobs_job_live"),
        "live_stats": ({"now": None, "limit": 10, "blocked": store.queues_param([])},
                       "ultjobs_job_pending"),
        "live_first": ({"now": None, "queue": "mail", "status": "queued"}, "ultjobs_job_live"),
        "finished_counts": ({"limit": 10}, "ultjobs_job_name_status"),
    }
    for name, (params, index) in checks.items():
        plan = explain(alias, store.sql[name], params, keep=index)
        job_reads = [line for line in plan if re.search(r"(?i)\b(scan|search)\b", line)
                     and re.search(r"\b(django_ultjobs_job|j)\b( |$)", line)]
        # Every read of the jobs table goes through an index (PostgreSQL: "Index [Only] Scan
        # using", SQLite: "USING [COVERING] INDEX"), never the table alone.
        assert job_reads and all(re.search(r"(?i)index", line) for line in job_reads), plan
        assert any(index in line for line in job_reads), (name, plan)


def explain(alias: str, sql: str, params: dict[str, Any], keep: str = "") -> list[str]:
    """The plan of ``sql`` after ANALYZE; on PostgreSQL with the indexes over every row but
    ``keep`` dropped and scans of the table or bitmaps off (a table this small is cheaper read
    whole: the question is whether each count can be a range of its index)."""
    with transaction.atomic(using=alias), get_store(alias).cursor() as cur:
        cur.execute("ANALYZE")
        if connections[alias].vendor == "postgresql":
            dropped = {"ultjobs_job_claim_kind", "ultjobs_job_name_status"} - {keep}
            cur.execute(f"DROP INDEX {', '.join(sorted(dropped))}")
            cur.execute("SET LOCAL enable_seqscan = off")
            cur.execute("SET LOCAL enable_bitmapscan = off")
            cur.execute("EXPLAIN " + sql, params)
            plan = [row[0] for row in cur.fetchall()]
        else:
            cur.execute("EXPLAIN QUERY PLAN " + sql, params)
            plan = [str(row[-1]) for row in cur.fetchall()]
        transaction.set_rollback(True, using=alias)
    return plan


def test_the_attempts_a_job_s_row_holds_are_read_through_their_index(alias: str) -> None:
    """The attempts view's second half (rule 97 (attempt-on-row)) is a range of the partial index
    of those rows on both engines: SQLite's planner uses it only when the view states its
    predicate as the index does, and read every job row before."""
    add(alias, 300)
    add(alias, 50, status="succeeded", finished_ago=30)
    sql = ("SELECT outcome, count(*) FROM django_ultjobs_attemptrecord "
           "WHERE finished_at >= %(since)s GROUP BY outcome")
    since = get_store(alias).format_time(get_store(alias).db_now() - timedelta(hours=1))
    plan = explain(alias, sql, {"since": since})
    job_reads = [line for line in plan if re.search(r"\b(django_ultjobs_job|j)\b( |$)", line)
                 and re.search(r"(?i)\b(scan|search)\b", line)]
    assert job_reads and all("ultjobs_job_attempt_on_row" in line for line in job_reads), plan
