"""``manage.py ultjobs`` through ``call_command``, on SQLite and PostgreSQL: every subcommand,
its table and its ``--json``, and bad input refused with a one-line ``CommandError`` before any
SQL. The actions are the admin's operations (rules 75 (paused-queue), 77 (cli-through-operations)):
the same rows change, the same are skipped and said so, and each action is logged with who did
it."""

from __future__ import annotations

import io
import json
from argparse import _SubParsersAction
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command, load_command_class
from django.core.management.base import CommandError
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_ultjobs.models import Job, JobAttempt, QueuePause, Worker
from django_ultjobs.operations import CHUNK, pause_queue
from tests.conftest import REPO, events

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def run(*args: str) -> tuple[str, str]:
    """Run ``ultjobs *args``; return what it wrote to stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    call_command("ultjobs", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def listed(*args: str) -> list[int]:
    """The ids ``ultjobs list --json *args`` prints."""
    return [row["id"] for row in json.loads(run("list", "--json", *args)[0])]


def make(alias: str, **fields: Any) -> Job:
    fields.setdefault("name", "add")
    return Job.objects.using(alias).create(**fields)


def refused(*args: str) -> str:
    with pytest.raises(CommandError) as error:
        run(*args)
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message
    return message


# -- list -----------------------------------------------------------------------------------------


TRACEBACK = ("Traceback (most recent call last):\n  File \"jobs.py\", line 3, in charge\n"
             "    raise ValueError(f\"bad amount {amount}\")\nValueError: bad amount -3")


def test_list_prints_a_table_newest_first_and_filters(alias: str) -> None:
    old = make(alias, queue="a", status="failed", last_error=TRACEBACK)
    new = make(alias, queue="b", name="send_mail")
    out, _ = run("list")
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["ID", "NAME", "QUEUE", "STATUS"]
    assert lines[1].split()[0] == str(new.id) and lines[2].split()[0] == str(old.id)
    # The exception's own line, as the admin shows it, not the traceback's first characters.
    assert lines[2].endswith("ValueError: bad amount -3") and "Traceback" not in out
    assert listed("--status", "failed") == [old.id]
    assert listed("--queue", "b") == [new.id]
    assert listed("--job", "send_mail", "--job", "add") == [new.id, old.id]
    assert run("list", "--queue", "nowhere")[0].strip() == "no jobs match"


def test_list_json_is_the_rows_with_iso_times(alias: str) -> None:
    job = make(alias, queue="a", args=[1, 2])
    rows = json.loads(run("list", "--json")[0])
    assert [r["id"] for r in rows] == [job.id]
    assert rows[0]["queue"] == "a" and rows[0]["status"] == "queued"
    assert rows[0]["exception"] == "" and rows[0]["last_error"] == ""
    assert timezone.datetime.fromisoformat(rows[0]["created_at"])
    assert "args" not in rows[0]  # a listing never reads the arguments


def test_list_since_takes_a_span_or_an_iso_time(alias: str) -> None:
    job = make(alias)
    Job.objects.using(alias).filter(id=job.id).update(
        created_at=timezone.now() - timedelta(hours=3))
    recent = make(alias)
    ids = [r["id"] for r in json.loads(run("list", "--since", "2h", "--json")[0])]
    assert ids == [recent.id]
    since = (timezone.now() - timedelta(days=1)).isoformat()
    assert len(json.loads(run("list", "--since", since, "--json")[0])) == 2


@pytest.mark.parametrize("args, words", [
    (("list", "--since", "yesterday"), "--since takes a span"),
    (("list", "--since", "5y"), "--since takes a span"),
    (("list", "--limit", "0"), "--limit must be from 1"),
    (("list", "--status", "done"), "invalid choice"),
    (("show", "x"), "a job id is a whole number in the digits 0-9"),
    (("list", "--queue", "\udcff"), "a queue name cannot contain"),
    (("list", "--job", "x" * 201), "a job name is 1 to 200 characters"),
    (("list", "--job", "\udcff"), "a job name cannot contain"),
    (("retry", "--failed", "--job", "a\x00b"), "a job name cannot contain"),
    (("show", "0"), "a job id is a whole number"),
    (("show", str(2**63)), "a job id is a whole number"),
    (("cancel",), "cancel takes job ids, filters (--status, --queue, --job, --older-than, "
                  "--tag, --batch, --workflow), or --all"),
    (("cancel", "1", "--queue", "a"), "cancel takes job ids or filters, not both: drop the ids "
                                      "or --queue"),
    (("cancel", "1", "--all"), "not both: drop the ids or --all"),
    (("cancel", "--all", "--job", "add", "--tag", "t"), "--all is every job cancel can change: "
                                                        "give it alone, or --job --tag"),
    (("cancel", "--older-than", "soon"), "--older-than takes a span of time (90s, 15m, 2h, 7d, "
                                         "1w), not 'soon'"),
    (("cancel", "--older-than", "2y"), "--older-than takes a span of time"),
    (("cancel", "--older-than=-1h"), "--older-than takes a span of time"),
    (("cancel", "--older-than", "6000w"), "--older-than '6000w' reaches back more than 100"),
    (("cancel", "--status", "succeeded"), "invalid choice: 'succeeded'"),
    (("retry", "--status", "queued"), "invalid choice: 'queued'"),
    (("cancel", "--tag", "x" * 101), "--tag: each tag must be 1 to"),
    (("cancel", "--queue", "a", "--chunk-size", "0"), "--chunk-size must be from 1 to 10,000"),
    (("retry", "--all", "--chunk-size", "10001"), "--chunk-size must be from 1 to 10,000"),
    (("retry", "--failed", "--status", "failed"), "--failed is --status failed"),
    (("cancel", "-1"), "a job id is a whole number"),
    (("cancel", "1", "--reason", "a\x00b"), "cannot contain a NUL"),
    (("retry",), "retry takes job ids, filters (--status, --queue, --job, --since, "
                 "--older-than, --tag, --batch, --workflow), or --all"),
    (("retry", "1", "--failed"), "not both: drop the ids or --failed"),
    (("retry", "1", "--job", "add"), "not both: drop the ids or --job"),
    (("retry", "--failed", "--since", "soon"), "--since takes a span"),
    (("pause", "x" * 101), "queue name is 1 to 100"),
    (("pause", "q", "--reason", "x" * 1001), "at most 1000 characters"),
    (("resume", ""), "queue name is 1 to 100"),
    (("list", "--database", "nope"), "--database 'nope' is not in settings.DATABASES"),
    ((), "required: SUBCOMMAND"),
    (("frobnicate",), "invalid choice"),
])
def test_bad_input_is_one_line_before_any_sql(alias: str, args: tuple[str, ...],
                                              words: str) -> None:
    # rule 77 (cli-through-operations)
    with CaptureQueriesContext(connections[alias]) as queries:
        message = refused(*args)
    assert words in message, message
    assert not queries, [q["sql"] for q in queries]


# -- show -----------------------------------------------------------------------------------------


def test_show_prints_the_job_its_attempts_and_its_error(alias: str) -> None:
    job = make(alias, status="failed", attempt=2, last_error=TRACEBACK)
    for n, outcome in ((1, "retrying"), (2, "failed")):
        JobAttempt.objects.using(alias).create(
            job=job, attempt=n, outcome=outcome, worker_id="w1",
            error=TRACEBACK.replace("-3", f"-{n}"))
    out, _ = run("show", str(job.id))
    attempts = out[out.index("attempts:"):out.index("last error:")]
    assert "retrying" in attempts and "Traceback" not in attempts
    assert "ValueError: bad amount -1" in attempts and "ValueError: bad amount -2" in attempts
    # The exception's line first, then the traceback in full.
    assert "last error: ValueError: bad amount -3\n\nTraceback (most recent" in out
    assert out.rstrip().endswith("ValueError: bad amount -3")
    shown = json.loads(run("show", str(job.id), "--json")[0])
    assert shown["id"] == job.id and [a["outcome"] for a in shown["attempts"]] == [
        "retrying", "failed"]
    assert shown["last_error"] == TRACEBACK
    assert shown["exception"] == "ValueError: bad amount -3"
    assert shown["attempts"][0]["exception"] == "ValueError: bad amount -1"


def test_show_of_a_job_that_is_not_there_says_so(alias: str) -> None:
    assert f"no job has id 99999 in database {alias!r}" == refused("show", "99999")


# -- cancel and retry -----------------------------------------------------------------------------


def test_cancel_does_what_the_admin_does_and_logs_who(alias: str, caplog) -> None:
    # rule 77 (cli-through-operations)
    queued = make(alias)
    running = make(alias, status="running")
    done = make(alias, status="succeeded")
    caplog.set_level("INFO", logger="django_ultjobs")
    out, err = run("cancel", str(queued.id), str(running.id), str(done.id),
                   "--reason", "bad deploy")
    assert "cancelled 1 queued or waiting job(s); asked 1 running job(s)" in out
    assert "skipped 1 job(s)" in err
    rows = dict(Job.objects.using(alias).values_list("id", "status"))
    assert rows == {queued.id: "cancelled", running.id: "running", done.id: "succeeded"}
    assert Job.objects.using(alias).get(id=running.id).cancel_requested
    assert Job.objects.using(alias).get(id=queued.id).last_error.endswith(": bad deploy")
    [logged] = events(caplog, "jobs.operations.cancelled")
    assert logged["by"].startswith("cli") and logged["reason"] == "bad deploy"
    assert (logged["cancelled"], logged["requested"]) == (1, 1)


def test_retry_ids_and_retry_failed_narrowed_by_job_and_since(alias: str, caplog) -> None:
    caplog.set_level("INFO", logger="django_ultjobs")
    an_hour_ago = timezone.now() - timedelta(hours=1)
    old = make(alias, status="failed", finished_at=an_hour_ago - timedelta(hours=1))
    recent = make(alias, status="failed", finished_at=timezone.now())
    other = make(alias, name="other", status="failed", finished_at=timezone.now())
    cancelled = make(alias, status="cancelled", finished_at=timezone.now())
    queued = make(alias)
    out, err = run("retry", str(cancelled.id), str(queued.id))
    assert "queued 1 job(s) again" in out and "skipped 1 job(s)" in err
    out, _ = run("retry", "--failed", "--job", "add", "--since", "30m")
    assert "queued 1 job(s) again" in out
    statuses = dict(Job.objects.using(alias).values_list("id", "status"))
    assert statuses[recent.id] == "queued"
    assert statuses[old.id] == statuses[other.id] == "failed"
    run("retry", "--failed")
    assert not Job.objects.using(alias).filter(status="failed").exists()
    assert [e["retried"] for e in events(caplog, "jobs.operations.retried")] == [1, 1, 2]


def test_a_large_retry_is_one_result_line_with_its_time_when_not_on_a_terminal(alias: str) -> None:
    Job.objects.using(alias).bulk_create(
        [Job(name="add", status="failed") for _ in range(CHUNK * 2 + 10)])
    out, err = run("retry", "--failed")
    assert err == ""
    [line] = out.splitlines()
    assert line.startswith(f"queued {CHUNK * 2 + 10} job(s) again, runnable now (in ")


# -- pause, resume, stats ------------------------------------------------------------------------


def test_pause_and_resume_say_what_they_did(alias: str) -> None:
    assert "paused queue 'mail'" in run("pause", "mail", "--reason", "smtp down")[0]
    assert "was paused already" in run("pause", "mail")[0]
    pause = QueuePause.objects.using(alias).get()
    assert pause.reason == "smtp down" and pause.paused_by.startswith("cli")
    assert "resumed queue 'mail'" in run("resume", "mail")[0]
    assert "was not paused" in run("resume", "mail")[0]


def test_stats_per_queue_and_per_worker(alias: str) -> None:
    make(alias, queue="a")
    make(alias, queue="a", visible_at=timezone.now() + timedelta(hours=1))
    make(alias, queue="a", status="running", visible_at=timezone.now() + timedelta(minutes=1),
         worker_id="w1")
    make(alias, queue="a", status="running", worker_id="w1")  # a lapsed lease: still its run
    make(alias, queue="b", status="failed", finished_at=timezone.now())
    pause_queue("c", using=alias)
    Worker.objects.using(alias).create(id="w1", hostname="h", pid=1, threads=4,
                                       queues=["a"], in_flight=0, visibility_timeout=30,
                                       heartbeat_interval=10)
    stats = json.loads(run("stats", "--json")[0])
    queues = {q["queue"]: q for q in stats["queues"]}
    assert {k: queues["a"][k] for k in ("runnable", "delayed", "running", "paused")} == {
        "runnable": 1, "delayed": 1, "running": 2, "paused": False}
    assert queues["a"]["oldest_runnable_age"] >= 0
    assert queues["b"]["failed_last_hour"] == 1
    assert queues["c"]["paused"] is True and queues["c"]["oldest_runnable_age"] is None
    # The worker's runs counted from its running jobs, not from its row's in_flight (0 until
    # its next heartbeat).
    [worker] = stats["workers"]
    assert (worker["worker_id"], worker["state"], worker["runs"]) == ("w1", "running", 2)
    out, _ = run("stats")
    assert out.splitlines()[0].split()[:3] == ["QUEUE", "PAUSED", "RUNNABLE"]
    assert "WORKER" in out and "w1" in out


# -- documented -----------------------------------------------------------------------------------


def test_every_subcommand_and_flag_is_in_operations_md() -> None:
    text = (REPO / "docs" / "operations.md").read_text()
    parser = load_command_class("django_ultjobs", "ultjobs").create_parser("manage.py", "ultjobs")
    [sub] = [a for a in parser._actions if isinstance(a, _SubParsersAction)]
    for name, each in sub.choices.items():
        assert f"ultjobs {name}" in text, name
        for action in each._actions:
            assert action.help, (name, action.dest)
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert flag in text, (name, flag)
