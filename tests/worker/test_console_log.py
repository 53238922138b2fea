"""The worker's console log: a project with no LOGGING for django_ultjobs still sees what its
worker does, human-readable (or JSON for a log shipper); a project that configures logging is
left alone.

Every test runs a real ``runjobworker --burst`` process on jobs queued by the test and reads
what it wrote.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from django_ultjobs.models import Job
from tests.conftest import REPO, worker_command, worker_env
from tests.testapp.jobs import add, flaky, worker_always_fails

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

#: ``2026-12-04 16:30:01.123 INFO jobs.worker.started worker_id=...``
TEXT_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(jobs\.[a-z.-]+) ")


def queue_a_mix() -> None:
    """One job that succeeds, one that fails once then succeeds, one that fails for good."""
    add.enqueue(1, 2)
    flaky.enqueue(fail_times=1)
    worker_always_fails.enqueue()


def run_worker(*flags: str, logging: str) -> subprocess.CompletedProcess[str]:
    # Transactions that begin as the writer, as getting-started sets them, so the system check
    # for SQLite's deferred mode (django_ultjobs.W010) adds no lines of its own.
    env = {**worker_env("default"), "ULTJOBS_TEST_LOGGING": logging,
           "ULTJOBS_TEST_SQLITE_TRANSACTION_MODE": "IMMEDIATE"}
    result = subprocess.run(worker_command("default", "--burst", *flags), env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result


def events(lines: list[str]) -> list[str]:
    return [TEXT_LINE.match(line).group(2) for line in lines]  # type: ignore[union-attr]


def test_a_project_without_logging_gets_readable_lines_at_info() -> None:
    queue_a_mix()
    result = run_worker(logging="none")
    lines = result.stderr.splitlines()
    assert lines and all(TEXT_LINE.match(line) for line in lines), result.stderr
    seen = events(lines)
    assert seen[0] == "jobs.worker.started" and seen[-1] == "jobs.worker.stopped", seen
    # The stop line sums the run up: six runs claimed and six outcomes written (1 + 2 runs of
    # flaky + 3 of worker_always_fails), none stale; the claim statements it took are counted
    # apart, never read as jobs.
    assert re.search(r" jobs_claimed=6 claim_statements=\d+ settled=6 stale=0 unstorable=0$",
                     lines[-1]), lines[-1]
    # Failures and retries, with their level: two retries of worker_always_fails and one of
    # flaky, then worker_always_fails fails for good.
    assert seen.count("jobs.worker.retrying") == 3, result.stderr
    assert seen.count("jobs.worker.failed") == 1, result.stderr
    assert any(" ERROR jobs.worker.failed " in line and "worker_always_fails" in line
               for line in lines), result.stderr
    # A settle per run would drown the rest on a busy worker: only from -v 2.
    assert "jobs.worker.settled" not in seen
    assert Job.objects.filter(status="succeeded").count() == 2


def test_verbosity_2_adds_a_line_per_settle() -> None:
    queue_a_mix()
    result = run_worker("-v", "2", logging="none")
    lines = result.stderr.splitlines()
    assert all(TEXT_LINE.match(line) for line in lines), result.stderr
    settled = [line for line in lines if " INFO jobs.worker.settled " in line]
    # add once, flaky twice, worker_always_fails three times.
    assert len(settled) == 6, result.stderr
    assert sum("status=succeeded" in line for line in settled) == 2, settled


def test_verbosity_0_keeps_only_warnings_and_errors() -> None:
    queue_a_mix()
    result = run_worker("-v", "0", logging="none")
    levels = {TEXT_LINE.match(line).group(1)  # type: ignore[union-attr]
              for line in result.stderr.splitlines()}
    assert levels == {"WARNING", "ERROR"}, result.stderr


def test_log_format_json_writes_one_object_per_line() -> None:
    queue_a_mix()
    result = run_worker("--log-format", "json", "-v", "2", logging="none")
    entries = [json.loads(line) for line in result.stderr.splitlines()]
    assert entries, result.stderr
    assert all({"time", "level", "logger", "event"} <= set(e) for e in entries), entries
    assert entries[0]["event"] == "jobs.worker.started"
    assert entries[0]["threads"] == 4 and entries[0]["queues"] == "default"
    failed = [e for e in entries if e["event"] == "jobs.worker.failed"]
    assert len(failed) == 1 and failed[0]["level"] == "ERROR", entries
    assert failed[0]["job"] == "worker_always_fails"
    assert sum(e["event"] == "jobs.worker.settled" for e in entries) == 6


def test_a_project_that_configures_our_loggers_is_left_alone() -> None:
    # tests/settings.py: a bare StreamHandler on django_ultjobs at INFO, no formatter.
    queue_a_mix()
    result = run_worker("-v", "2", logging="settings")
    lines = result.stderr.splitlines()
    assert sum(line.startswith("jobs.worker.started ") for line in lines) == 1, result.stderr
    assert not any(TEXT_LINE.match(line) for line in lines), result.stderr
    # Its level (INFO) decides, not -v: the settles are there at INFO as the project asked.
    assert sum(line.startswith("jobs.worker.settled ") for line in lines) == 6


def test_a_root_handler_counts_as_configured_and_nothing_is_doubled() -> None:
    queue_a_mix()
    result = run_worker("--log-format", "json", logging="root")
    lines = result.stderr.splitlines()
    started = [line for line in lines if "jobs.worker.started" in line]
    assert started and all(line.startswith("PROJECT INFO ") for line in started), lines
    assert len(started) == 1, lines
    assert "--log-format is ignored" in result.stderr
