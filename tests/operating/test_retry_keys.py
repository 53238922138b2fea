"""``manage.py ultjobs retry`` of a unique job whose key a later enqueue took over, as its own
process on SQLite and PostgreSQL (rule 107 (retry-takes-key-back)): refused in one line naming the
job that holds the key (exit 1), run beside it only with ``--keyless``, and given its key back when
no job holds it."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from django_ultjobs.models import Job
from tests.conftest import REPO, worker_env
from tests.testapp.jobs import unique_touch

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def ultjobs(alias: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "django", "ultjobs", *args, "--database", alias],
                          cwd=REPO, env=worker_env(alias), capture_output=True, text=True,
                          timeout=120)


def failed(alias: str, job_id: int) -> None:
    Job.objects.using(alias).filter(id=job_id).update(
        status="failed", finished_at=timezone.now() - timedelta(minutes=1))


def last_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    """stderr without Django's system check report (the suite's SQLite is in the mode W010
    warns of)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if lines and lines[0] == "System check identified some issues:":
        lines = [line for line in lines[1:]
                 if not line.startswith(("WARNINGS:", "?: (", "\tHINT:"))]
    return lines


def test_retry_beside_the_keys_holder_is_one_line_naming_it_and_keyless_runs_it(
        alias: str) -> None:
    old = unique_touch.enqueue("a")
    failed(alias, old.id)
    holder = unique_touch.enqueue("a")
    other = unique_touch.enqueue("b")
    failed(alias, other.id)

    refused = ultjobs(alias, "retry", str(old.id), str(other.id))
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert "Traceback" not in refused.stderr
    assert refused.stdout.startswith("queued 1 job(s) again")  # the other one
    # The suite's settings log INFO to stderr too: the log line, then the one error line.
    lines = [line for line in last_lines(refused) if not line.startswith("jobs.operations.")]
    assert lines == [
        f"CommandError: not retried: job {old.id}: key {holder.unique_key!r} is held by job "
        f"{holder.id}; retry --keyless runs it without the key, beside that job"]
    statuses = dict(Job.objects.using(alias).values_list("id", "status"))
    assert (statuses[old.id], statuses[other.id]) == ("failed", "queued")

    keyless = ultjobs(alias, "retry", "--keyless", str(old.id))
    assert keyless.returncode == 0, keyless.stderr
    assert f"without their unique key, beside the job that holds it: {old.id}" in keyless.stderr
    row = Job.objects.using(alias).get(id=old.id)
    assert (row.status, row.unique_key) == ("queued", None)


def test_retry_gives_the_key_back_once_its_holder_finished(alias: str) -> None:
    old = unique_touch.enqueue("a")
    failed(alias, old.id)
    holder = unique_touch.enqueue("a")
    Job.objects.using(alias).filter(id=holder.id).update(status="succeeded",
                                                         finished_at=timezone.now())
    result = ultjobs(alias, "retry", "--failed")
    assert result.returncode == 0, result.stderr
    assert Job.objects.using(alias).get(id=old.id).unique_key == holder.unique_key
    assert unique_touch.enqueue("a").id == old.id
