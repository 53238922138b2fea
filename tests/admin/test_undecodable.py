"""Rule 15 (undecodable-row-fails-alone) in the admin: the page of a job whose stored JSON cannot be
decoded still renders.

Such a row (raw SQL, another producer) fails at its first claim; the operator then opens its
page to see why, and a server error there would hide exactly that.
"""

from __future__ import annotations

import pytest
from django.db import connections
from django.urls import reverse

from tests.admin.conftest import client_for
from tests.hostile import nested, write_raw_args
from tests.testapp.jobs import add

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def _bad_args(alias: str) -> list[dict[str, str]]:
    depth = 3000 if connections[alias].vendor == "postgresql" else 1500
    rows = [{"text": nested(depth)}, {"text": "[" + "9" * 5000 + "]"}]
    if connections[alias].vendor == "sqlite":
        rows.append({"hex_bytes": "5b22ff225d"})  # ["\xff"]: not UTF-8
    return rows


@pytest.mark.parametrize("case", range(3))
def test_the_page_of_a_job_whose_args_cannot_be_decoded_renders(alias: str, viewer,
                                                                case: int) -> None:
    bad = _bad_args(alias)
    if case >= len(bad):
        pytest.skip("PostgreSQL stores only text valid in its encoding")
    job = add.enqueue(1, b=2)
    write_raw_args(alias, job.id, bad[case].get("text"), hex_bytes=bad[case].get("hex_bytes"))
    client = client_for(viewer)
    response = client.get(reverse("admin:django_ultjobs_job_change", args=[job.id]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "cannot be decoded" in html
    assert "&quot;b&quot;: 2" in html  # the other columns are there
    listing = client.get(reverse("admin:django_ultjobs_job_changelist"))
    assert listing.status_code == 200 and f"#{job.id}" in listing.content.decode()
