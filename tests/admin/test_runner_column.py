"""The in-flight page names the child process running each job of a ``--pool process`` worker,
read from its worker's row in the page's own query (both engines)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_ultjobs.models import Worker
from tests.admin.conftest import IN_FLIGHT, client_for, make_job, page

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_the_in_flight_page_names_each_jobs_child_process(alias: str, viewer) -> None:
    now = timezone.now()
    live = dict(status="running", attempt=1, claimed_at=now,
                visible_at=now + timedelta(seconds=30))
    in_child = make_job(alias, worker_id="host:1:pool", **live)
    on_thread = make_job(alias, worker_id="host:2:threads", **live)
    Worker.objects.using(alias).create(id="host:1:pool", hostname="host", pid=1, threads=2,
                                       runners={str(in_child.id): 4242})
    Worker.objects.using(alias).create(id="host:2:threads", hostname="host", pid=2, threads=4)
    client = client_for(viewer)
    with CaptureQueriesContext(connections[alias]) as jobs_queries:
        html = page(client, IN_FLIGHT)
    assert html.count("child 4242") == 1
    row = html[html.index(f"#{on_thread.id}<"):]
    assert "child" not in row[:row.index("</tr>")]
    # The runners ride on the rows' own statement: no query per row, none of its own.
    assert not any("django_ultjobs_worker" in q["sql"] and "runners" in q["sql"]
                   and "django_ultjobs_job" not in q["sql"]
                   for q in jobs_queries.captured_queries)
