"""Rule 109 (missing-tables-named): every jobs admin page on a database nobody migrated says so in
one line, with the command, on both engines; a missing table of the site's own is still the site's
error.

The tables are taken away inside the test's transaction (DDL is transactional on both engines)
and come back when it rolls back.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.urls import reverse

from tests.admin.conftest import (
    APP_INDEX,
    IN_FLIGHT,
    JOBS,
    LOST,
    PASSWORD,
    SLOTS,
    WORKERS,
    client_for,
)

pytestmark = pytest.mark.django_db(databases="__all__")

PAGES = {
    "app index": APP_INDEX,
    "jobs": JOBS,
    "in flight": IN_FLIGHT,
    "held slots": SLOTS,
    "lost-slot cancellations": LOST,
    "workers": WORKERS,
    "schedules": reverse("admin:django_ultjobs_jobschedule_changelist"),
    "queues": reverse("admin:django_ultjobs_queuepause_changelist"),
    "a job": reverse("admin:django_ultjobs_job_change", args=[1]),
}


def unmigrate(alias: str) -> None:
    """Take every table and view of django_ultjobs away until the test's transaction ends."""
    connection = connections[alias]
    with connection.cursor() as cur:
        found = connection.introspection.get_table_list(cur)
        for info in found:
            if info.name.startswith("django_ultjobs_") and info.type == "v":
                cur.execute(f"DROP VIEW {connection.ops.quote_name(info.name)}")
        for info in found:
            if info.name.startswith("django_ultjobs_") and info.type == "t":
                away = connection.ops.quote_name(f"away_{info.name}")
                cur.execute(f"ALTER TABLE {connection.ops.quote_name(info.name)} RENAME TO "
                            f"{away}")


@pytest.mark.parametrize("url", list(PAGES.values()), ids=list(PAGES))
def test_an_admin_page_before_migrate_says_run_migrate(alias: str, url: str) -> None:
    client = client_for(User.objects.create_superuser("admin", password=PASSWORD))
    unmigrate(alias)
    response = client.get(url)
    # The app index lists the models still; in place of its figures, the line.
    status = 200 if url == APP_INDEX else 503
    assert response.status_code == status, (response.status_code, response.content[:2000])
    html = response.content.decode()
    assert html.count('class="errornote"') == 1, html
    flag = "" if alias == "default" else f" --database {alias}"
    assert (f"the django_ultjobs tables do not exist in database &#x27;{alias}&#x27; ("
            in html), html
    assert f"run `python manage.py migrate{flag}`" in html, html
    # In the admin's own page, so the operator keeps the navigation.
    assert 'id="site-name"' in html, html
