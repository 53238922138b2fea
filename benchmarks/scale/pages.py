"""The operator's read paths, timed: admin pages through Django's test client as a logged-in
superuser, the ``ultjobs`` CLI's ``stats`` and ``list``, and the stats view as an autoscaler
reads it, each with the statements it ran and the slowest of them explained.
"""

from __future__ import annotations

import io
import json
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from benchmarks.admin_big_table import FULL_COUNT
from benchmarks.scale.fill import CAPPED_NAMES, NAMES, heartbeat

BASE = "/admin/django_ultjobs/"
#: Statements explained per read path: its slowest ones.
EXPLAINED = 3


@dataclass
class Timed:
    """One read path's figures: the median of ``runs`` and the statements of the last run."""

    name: str
    median_ms: float
    best_ms: float
    runs: list[float]
    queries: int
    #: Summed time of the statements, as Django's cursor wrapper timed them.
    sql_ms: float
    full_counts: int
    #: The slowest statements of the last run: (ms, SQL).
    slowest: list[tuple[float, str]] = field(default_factory=list)
    #: ``EXPLAIN (ANALYZE, BUFFERS)`` of each of ``slowest`` (filled in by ``explain_slowest``).
    plans: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def register_jobs() -> None:
    """Register the job names the rows carry, as the site's jobs.py modules would (the first
    ``CAPPED_NAMES`` capped at four runs fleet-wide)."""
    from django_ultjobs import job

    def body() -> None:
        return None

    for i in range(NAMES):
        job(name=f"app.jobs.job_{i}", concurrency=4 if i < CAPPED_NAMES else None)(body)


def time_call(name: str, call: Callable[[], Any], repeat: int) -> Timed:
    """Run ``call`` once to warm up, then ``repeat`` times, each with its statements captured."""
    call()
    times: list[float] = []
    runs: list[CaptureQueriesContext] = []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            call()
            times.append((time.perf_counter() - started) * 1000)
        runs.append(captured)
    statements = [(float(q["time"]) * 1000, q["sql"]) for q in runs[-1].captured_queries]
    slowest = sorted(statements, key=lambda s: -s[0])[:EXPLAINED]
    return Timed(name, statistics.median(times), min(times), [round(t, 2) for t in times],
                 len(statements), sum(ms for ms, _ in statements),
                 sum(1 for _, sql in statements if FULL_COUNT.search(sql)), slowest)


def explain_slowest(timed: Timed) -> None:
    """Add the plan of each of ``timed``'s slowest statements: ``EXPLAIN (ANALYZE, BUFFERS)``
    on PostgreSQL, ``EXPLAIN QUERY PLAN`` on SQLite."""
    postgresql = connection.vendor == "postgresql"
    for _, sql in timed.slowest:
        # The package's named statements start with their tag, /* django_ultjobs:name */.
        if not re.sub(r"^\s*/\*.*?\*/", "", sql).lstrip().upper().startswith(("SELECT", "WITH")):
            timed.plans.append("(not a query: not explained)")
            continue
        if re.search(r"\$\d", sql):
            # The log shows a named statement's placeholders, not the values it ran with.
            timed.plans.append("(bound parameters: not explained)")
            continue
        with connection.cursor() as cur:
            if postgresql:
                cur.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")
                timed.plans.append("\n".join(row[0] for row in cur.fetchall()))
            else:
                cur.execute(f"EXPLAIN QUERY PLAN {sql}")
                timed.plans.append(sqlite_plan(cur.fetchall()))


def sqlite_plan(rows: list[tuple[int, int, int, str]]) -> str:
    """SQLite's query plan rows (id, parent, _, detail) as an indented tree."""
    depths: dict[int, int] = {0: -1}
    lines = []
    for node, parent, _, detail in rows:
        depths[node] = depths.get(parent, -1) + 1
        lines.append("  " * depths[node] + detail)
    return "\n".join(lines)


def admin_pages(job_id: int) -> list[tuple[str, str]]:
    """The pages timed: the app index, the jobs list unfiltered and filtered, a job's page,
    the workers page."""
    return [
        ("admin: app index", BASE),
        ("admin: jobs list", f"{BASE}job/"),
        ("admin: jobs list, status=failed", f"{BASE}job/?status__exact=failed"),
        ("admin: jobs list, status=queued", f"{BASE}job/?status__exact=queued"),
        ("admin: jobs list, commonest name", f"{BASE}job/?name=app.jobs.job_0"),
        ("admin: jobs list, rarest name", f"{BASE}job/?name=app.jobs.job_{NAMES - 1}"),
        ("admin: job page", f"{BASE}job/{job_id}/change/"),
        ("admin: workers", f"{BASE}worker/"),
    ]


def time_admin(repeat: int, explain: bool) -> list[Timed]:
    """Time each admin page as a superuser; the slowest statements explained."""
    from django.contrib.auth.models import User
    from django.test import Client

    from django_ultjobs.models import Job

    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", password="bench")
    client = Client()
    client.force_login(user)
    # The newest failed job (its page lists three attempts), as an operator opens it; the
    # newest job where none failed.
    ids = Job.objects.order_by("-id").values_list("id", flat=True)
    job_id = ids.filter(status="failed").first() or ids.first()
    results = []
    for name, url in admin_pages(job_id):
        heartbeat()

        def get(url: str = url) -> None:
            response = client.get(url)
            if response.status_code != 200:
                raise RuntimeError(f"{url} answered {response.status_code}")

        results.append(time_call(name, get, repeat))
    if explain:
        for timed in results:
            explain_slowest(timed)
    return results


def time_stats(repeat: int, explain: bool) -> list[Timed]:
    """Time the stats view (``django_ultjobs.urls``) as an autoscaler reads it: the bearer
    token, no session."""
    from django.conf import settings
    from django.test import Client

    from benchmarks.scale.report import STATS_PATH

    token = settings.ULTJOBS["STATS_TOKEN"]
    client = Client(headers={"Authorization": f"Bearer {token}"})
    heartbeat()

    def get() -> None:
        response = client.get("/jobs/stats/")
        if response.status_code != 200:
            raise RuntimeError(f"/jobs/stats/ answered {response.status_code}")

    timed = time_call(STATS_PATH, get, repeat)
    if explain:
        explain_slowest(timed)
    return [timed]


def time_cli(repeat: int, explain: bool) -> list[Timed]:
    """Time ``ultjobs stats`` and ``ultjobs list`` (default, ``--status failed``, ``--job``) in
    this process (``call_command``: the interpreter's start is not the read path's)."""
    from django.core.management import call_command

    commands = [
        ("cli: ultjobs stats", ["stats"]),
        ("cli: ultjobs list", ["list"]),
        ("cli: ultjobs list --status failed", ["list", "--status", "failed"]),
        ("cli: ultjobs list --job <commonest>", ["list", "--job", "app.jobs.job_0"]),
    ]
    results = []
    for name, argv in commands:
        heartbeat()

        def run(argv: list[str] = argv) -> None:
            call_command("ultjobs", *argv, stdout=io.StringIO(), stderr=io.StringIO())

        results.append(time_call(name, run, repeat))
    if explain:
        for timed in results:
            explain_slowest(timed)
    return results


def dump(results: list[Timed]) -> list[dict[str, Any]]:
    return [json.loads(json.dumps(r.as_dict(), default=str)) for r in results]
