"""``manage.py ultjobs cancel`` and ``retry`` over many jobs, on SQLite and PostgreSQL
(rule 125 (bulk-cli-in-chunks)): filters that combine with AND, ``--dry-run``, ``--all``, a
summary of counts (never one line per job), ids that name no job said apart from jobs skipped
for their status (exit 3), and the work done a chunk per transaction, each committed before the
next begins."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.utils import timezone

from django_ultjobs.exceptions import OperationInputError
from django_ultjobs.management.selection import parse_span
from django_ultjobs.models import Job
from django_ultjobs.operations import cancel_jobs
from tests.operating.test_command_line_input import command

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

#: Jobs of the chunking tests: more than ten chunks of the default size.
MANY = 10_050


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("ultjobs", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def make(alias: str, **fields: Any) -> Job:
    fields.setdefault("name", "add")
    return Job.objects.using(alias).create(**fields)


def statuses(alias: str) -> dict[int, str]:
    return dict(Job.objects.using(alias).values_list("id", "status"))


def bulk(alias: str, count: int, **fields: Any) -> None:
    fields.setdefault("name", "add")
    Job.objects.using(alias).bulk_create([Job(**fields) for _ in range(count)], batch_size=2000)


# -- filters --------------------------------------------------------------------------------------


def test_cancel_filters_combine_with_and(alias: str) -> None:
    old = timezone.now() - timedelta(hours=2)
    match = [make(alias, queue="a", tags=["t", "u"], created_at=old),
             make(alias, queue="a", tags=["t"], created_at=old, status="waiting")]
    others = [make(alias, queue="b", tags=["t"], created_at=old),           # another queue
              make(alias, queue="a", name="other", tags=["t"], created_at=old),  # another job
              make(alias, queue="a", tags=["u"], created_at=old),            # without the tag
              make(alias, queue="a", tags=["t"]),                            # too recent
              make(alias, queue="a", tags=["t"], created_at=old, status="failed")]
    out, err = run("cancel", "--queue", "a", "--job", "add", "--tag", "t", "--older-than", "1h")
    assert out.startswith("cancelled 2 queued or waiting job(s); asked 0 running") and err == ""
    after = statuses(alias)
    assert [after[j.id] for j in match] == ["cancelled", "cancelled"]
    assert [after[j.id] for j in others] == [j.status for j in others]


def test_status_narrows_and_repeated_values_are_or(alias: str) -> None:
    queued = make(alias, queue="a")
    running = make(alias, queue="b", status="running")
    waiting = make(alias, queue="c", status="waiting")
    out, _ = run("cancel", "--status", "running", "--queue", "a", "--queue", "b")
    assert "cancelled 0 queued or waiting job(s); asked 1 running job(s)" in out
    assert Job.objects.using(alias).get(id=running.id).cancel_requested
    assert statuses(alias)[queued.id] == "queued" and statuses(alias)[waiting.id] == "waiting"


def test_retry_filters_and_the_failed_shorthand(alias: str) -> None:
    failed = make(alias, queue="a", status="failed", finished_at=timezone.now())
    cancelled = make(alias, queue="a", status="cancelled", finished_at=timezone.now())
    elsewhere = make(alias, queue="b", status="failed", finished_at=timezone.now())
    out, _ = run("retry", "--queue", "a", "--failed")
    assert out.startswith("queued 1 job(s) again")
    out, _ = run("retry", "--queue", "a")
    assert out.startswith("queued 1 job(s) again")
    after = statuses(alias)
    assert (after[failed.id], after[cancelled.id], after[elsewhere.id]) == (
        "queued", "queued", "failed")


def test_all_acts_on_every_job_it_can_change(alias: str) -> None:
    live = [make(alias, queue=q) for q in "abc"]
    done = make(alias, status="succeeded")
    out, err = run("cancel", "--all")
    assert out.startswith("cancelled 3 queued or waiting job(s)") and err == ""
    assert {statuses(alias)[j.id] for j in live} == {"cancelled"}
    assert statuses(alias)[done.id] == "succeeded"
    out, _ = run("retry", "--all")
    assert out.startswith("queued 3 job(s) again")


# -- dry run --------------------------------------------------------------------------------------


def test_dry_run_counts_what_would_change_and_changes_nothing(alias: str, caplog) -> None:
    caplog.set_level("INFO", logger="django_ultjobs")
    jobs = [make(alias, queue="a"), make(alias, queue="a", status="waiting"),
            make(alias, queue="a", status="running"),
            make(alias, queue="a", status="running", cancel_requested=True),
            make(alias, queue="a", status="failed"), make(alias, queue="a", status="cancelled")]
    before = dict(Job.objects.using(alias).values_list("id", "updated_at"))
    out, err = run("cancel", "--queue", "a", "--dry-run")
    assert out.strip() == ("dry run, nothing changed: would cancel 2 queued or waiting job(s) "
                           "and ask 1 running job(s) to stop")
    assert err.strip() == ("skipped 1 job(s) for their status: only queued, waiting or running "
                           "jobs can be cancelled, a running one once")
    with pytest.raises(CommandError) as missing:
        run("retry", *[str(j.id) for j in jobs], "999999", "--dry-run")
    assert str(missing.value) == "no job 999999" and missing.value.returncode == 3
    out, _ = run("retry", "--queue", "a", "--dry-run")
    assert out.startswith("dry run, nothing changed: would queue 2 failed or cancelled job(s)")
    assert dict(Job.objects.using(alias).values_list("id", "updated_at")) == before
    assert not [r for r in caplog.records if r.getMessage().startswith("jobs.operations")]


# -- ids that name no job -------------------------------------------------------------------------


def test_an_id_no_job_has_is_said_apart_from_skipped_and_exits_3(alias: str) -> None:
    queued = make(alias)
    done = make(alias, status="succeeded")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as error:
        call_command("ultjobs", "cancel", str(queued.id), str(done.id), "999999", "999998",
                     stdout=out, stderr=err)
    assert str(error.value) == "no job 999998, 999999" and error.value.returncode == 3
    assert out.getvalue().startswith("cancelled 1 queued or waiting job(s)")
    assert err.getvalue().strip().startswith("skipped 1 job(s) for their status")
    assert statuses(alias)[queued.id] == "cancelled"
    with pytest.raises(CommandError) as error:
        run("retry", str(queued.id), "123456789")
    assert str(error.value) == "no job 123456789"
    assert statuses(alias)[queued.id] == "queued"  # the jobs found were retried all the same


def test_the_exit_code_says_an_id_named_no_job(alias: str) -> None:
    job = make(alias, status="failed")
    found = command(alias, "ultjobs", "retry", str(job.id))
    assert found.returncode == 0, found.stderr
    missing = command(alias, "ultjobs", "retry", str(job.id), "999999")
    assert missing.returncode == 3 and "no job 999999" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert missing.stdout.startswith("queued 0 job(s) again")
    assert "skipped 1 job(s) for their status" in missing.stderr


# -- many jobs, in chunks -------------------------------------------------------------------------


def test_ten_thousand_jobs_by_filter_in_chunks_one_summary_line(alias: str) -> None:
    bulk(alias, MANY, queue="bulk")
    bulk(alias, 30, queue="other")
    out, err = run("cancel", "--queue", "bulk", "--chunk-size", "1000")
    assert err == ""
    [line] = out.splitlines()
    assert line.startswith(f"cancelled {MANY} queued or waiting job(s); asked 0 running")
    assert Job.objects.using(alias).filter(queue="bulk", status="cancelled").count() == MANY
    assert Job.objects.using(alias).filter(queue="other", status="queued").count() == 30
    out, _ = run("retry", "--queue", "bulk", "--status", "cancelled")
    assert out.startswith(f"queued {MANY} job(s) again")
    assert Job.objects.using(alias).filter(status="queued").count() == MANY + 30


def test_each_chunk_is_committed_before_the_next_begins(alias: str) -> None:
    bulk(alias, 10_000, queue="bulk")
    outside = connections.create_connection(alias)  # sees only what was committed
    seen: list[tuple[int, int]] = []
    late: list[int] = []

    def committed(done: int, total: int) -> None:
        with outside.cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM django_ultjobs_job WHERE status = 'cancelled'")
            seen.append((done, cursor.fetchone()[0]))
        if not late:  # a job enqueued while the walk runs is not part of it
            late.append(make(alias, queue="bulk").id)

    try:
        result = cancel_jobs(Job.objects.filter(queue="bulk"), using=alias, chunk_size=100,
                             progress=committed)
    finally:
        outside.close()
    assert result.cancelled == 10_000
    # 100 chunks, each one visible to another connection as soon as it is done: no
    # transaction spans two chunks.
    assert seen == [(n, n) for n in range(100, 10_001, 100)]
    assert statuses(alias)[late[0]] == "queued"


def test_a_span_past_timedeltas_range_is_refused_not_an_overflow() -> None:
    """Bad input is refused in one line (rule 16 (bad-input-refused)): the span is compared
    with its bound before a timedelta that would overflow is built."""
    with pytest.raises(OperationInputError, match="more than 100 years"):
        parse_span("99999999999999d", "--older-than")


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_cancel_older_than_a_huge_span_is_a_command_error(alias: str) -> None:
    with pytest.raises(CommandError, match="more than 100 years"):
        call_command("ultjobs", "cancel", "--older-than", "99999999999999d",
                     "--database", alias, stdout=io.StringIO(), stderr=io.StringIO())


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_since_a_time_out_of_range_in_utc_is_refused_alike_on_both_engines(alias: str) -> None:
    with pytest.raises(CommandError, match="out of range once read as UTC"):
        call_command("ultjobs", "list", "--since", "0001-01-01T00:00+01:00",
                     "--database", alias, stdout=io.StringIO(), stderr=io.StringIO())
