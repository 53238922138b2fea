"""The progress of ``ultjobs retry`` and ``cancel``: a live bar on a terminal, nothing but the
result line (with its time and rate) otherwise."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from django_ultjobs.models import Job
from django_ultjobs.operations import CHUNK

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_bar_shows_done_total_rate_and_time_left(alias: str) -> None:
    total = CHUNK * 2 + 10
    Job.objects.using(alias).bulk_create([Job(name="add", status="failed")
                                          for _ in range(total)])
    out, err = io.StringIO(), Terminal()
    call_command("ultjobs", "retry", "--failed", stdout=out, stderr=err)
    bar = err.getvalue()
    assert "retry" in bar and f"{total}/{total}" in bar and "100%" in bar
    assert "jobs/s" in bar
    assert f"queued {total} job(s) again" in out.getvalue()


def test_elsewhere_only_the_result_line_with_its_time_and_rate(alias: str) -> None:
    total = CHUNK + 1
    Job.objects.using(alias).bulk_create([Job(name="add") for _ in range(total)])
    ids = [str(i) for i in Job.objects.using(alias).values_list("id", flat=True)]
    out, err = io.StringIO(), io.StringIO()
    call_command("ultjobs", "cancel", *ids, stdout=out, stderr=err)
    assert err.getvalue() == ""
    [line] = out.getvalue().splitlines()
    assert line.startswith(f"cancelled {total} queued or waiting job(s)")
    assert " s, " in line and "jobs/s)" in line
