"""The admin shows a run's progress (rule 79 (progress-throttled-fenced)) on the jobs list, the
in-flight list and the job's page, and finds jobs by tag (rule 78 (tags-stored-whole)) with
``?tag=``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_ultjobs.models import Job
from tests.admin.conftest import IN_FLIGHT, JOBS, client_for, page
from tests.admin.test_pages import result_ids

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_admin_shows_progress_and_filters_by_tag(alias: str, viewer: Any) -> None:
    now = timezone.now()
    running = Job.objects.using(alias).create(
        name="add", status="running", attempt=1, worker_id="w1", claimed_at=now,
        visible_at=now + timedelta(seconds=30),
        progress={"done": 37, "total": 100, "message": "rows <b>"},
        tags=["customer:42"])
    other = Job.objects.using(alias).create(name="add", tags=["customer:420"])
    client = client_for(viewer)
    for url in (JOBS, IN_FLIGHT):
        html = page(client, url)
        assert "37 / 100 — rows &lt;b&gt;" in html
        assert '<progress class="ultjobs-progress" value="37" max="100">' in html
    tagged = page(client, JOBS + "?tag=customer:42")
    assert result_ids(tagged) == [running.id]
    assert result_ids(page(client, JOBS + "?tag=customer:420")) == [other.id]
    detail = page(client, f"{JOBS}{running.id}/change/")
    assert "37 / 100 — rows &lt;b&gt;" in detail and "?tag=customer%3A42" in detail
