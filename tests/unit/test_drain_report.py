"""The line a draining worker writes of the runs it still waits for."""

from __future__ import annotations

from datetime import UTC, datetime

from django_ultjobs.store import ClaimedJob
from django_ultjobs.worker.drain_report import MAX_NAMED, describe_runs
from django_ultjobs.worker.runs import Run


def run(job_id: int, name: str, started_at: float | None) -> Run:
    job = ClaimedJob(id=job_id, name=name, queue="default", priority=0, args=[], kwargs={},
                     attempt=1, max_attempts=3, token="t", traceparent="", tracestate="",
                     enqueued_by="", cancel_requested=False,
                     claimed_at=datetime(2026, 1, 1, tzinfo=UTC))
    built = Run(job=job, spec=None)
    built.started_at = started_at
    return built


def test_the_longest_running_first_with_seconds_and_a_run_not_started_yet() -> None:
    runs = [run(13, "slow_report", 97.0), run(12, "send_receipt", 74.9), run(14, "x", None)]
    assert describe_runs(runs, now=100.0) == (
        "#12 send_receipt 25.1 s, #13 slow_report 3.0 s, #14 x starting")


def test_past_the_named_ones_the_rest_are_counted() -> None:
    runs = [run(i, "n", float(i)) for i in range(MAX_NAMED + 3)]
    text = describe_runs(runs, now=100.0)
    assert text.count("#") == MAX_NAMED and text.endswith(", and 3 more"), text
