"""What a run's span records, on a real in-process worker (rule 14 (trace-never-fails)).

Nesting of a job enqueued by a job, no span leaking from one run into the next on one thread,
failures, cancellations (requested, lost slot), a parked unknown job, and durable steps.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from django_ultjobs.models import FINISHED_STATUSES, Job, JobAttempt, Slot
from django_ultjobs.observability.tracing import _process_actor, capture_trace_context
from django_ultjobs.store import NewJob, get_store
from tests.conftest import running_worker, wait_until
from tests.tracing import jobs
from tests.tracing.conftest import Spans, event_names, is_root, parent_id

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

#: Short ticks, so a cancellation reaches the run within a fraction of a second.
FAST = {"visibility_timeout": 3.0, "heartbeat_interval": 0.1}


def _finished(alias: str, *ids: int) -> bool:
    return Job.objects.using(alias).filter(
        pk__in=ids, status__in=FINISHED_STATUSES).count() == len(ids)


def _row(alias: str, job_id: int) -> Job:
    return Job.objects.using(alias).get(pk=job_id)


def _tracer() -> trace.Tracer:
    return trace.get_tracer("tests.tracing")


def test_a_job_enqueued_by_a_job_nests_under_it(alias: str, spans: Spans) -> None:
    # rule 14 (trace-never-fails): enqueued_by is job:<id>, and the child's span nests.
    with _tracer().start_as_current_span("test.caller") as caller:
        parent = jobs.parent.enqueue()
    with running_worker(alias):
        wait_until(lambda: _finished(alias, parent.id), message="parent job")
        child_id = _row(alias, parent.id).result
        wait_until(lambda: _finished(alias, child_id), message="child job")

    child = _row(alias, child_id)
    assert child.status == "succeeded" and child.enqueued_by == f"job:{parent.id}"
    (parent_span,) = spans.of_job(parent.id)
    (child_span,) = spans.of_job(child_id)
    assert parent_id(parent_span) == caller.get_span_context().span_id
    assert parent_id(child_span) == parent_span.context.span_id
    assert child_span.context.trace_id == parent_span.context.trace_id
    assert (child_span.attributes or {})["job.enqueued_by"] == f"job:{parent.id}"
    assert child.traceparent.split("-")[2] == f"{parent_span.context.span_id:016x}"


def test_outside_any_span_and_request_nothing_is_stored_and_the_process_enqueues(
        alias: str) -> None:
    # No active span: no traceparent is stored. No request either: enqueued_by names the
    # process (shell, cron…).
    assert not trace.get_current_span().get_span_context().is_valid
    assert capture_trace_context() == ("", "")
    job = jobs.noop.enqueue()
    row = _row(alias, job.id)
    assert (row.traceparent, row.tracestate) == ("", "")
    assert row.enqueued_by == _process_actor() != ""


def test_no_span_leaks_from_one_run_into_the_next_on_one_thread(alias: str, spans: Spans) -> None:
    # rule 14 (trace-never-fails) with rule 13 (nothing-leaks), nothing a run set up outlives it:
    # one executor thread runs four jobs back to back; those without a traceparent are each the root
    # of a trace of their own.
    first, second = jobs.noop.enqueue(), jobs.noop.enqueue()
    with _tracer().start_as_current_span("test.caller") as caller:
        traced = jobs.noop.enqueue()
    last = jobs.noop.enqueue()
    order = [first, second, traced, last]
    assert [bool(_row(alias, j.id).traceparent) for j in order] == [False, False, True, False]

    with running_worker(alias, threads=1):
        wait_until(lambda: _finished(alias, *(j.id for j in order)), message="four runs")

    results = [_row(alias, j.id).result for j in order]
    assert len({r["thread"] for r in results}) == 1, "the premise: one executor thread"
    assert [r["actor"] for r in results] == [f"job:{j.id}" for j in order]
    runs = [spans.of_job(j.id)[0] for j in order]
    assert sorted(runs, key=lambda s: s.start_time or 0) == runs, "the premise: run in order"
    assert parent_id(runs[2]) == caller.get_span_context().span_id
    for untraced in (runs[0], runs[1], runs[3]):
        assert is_root(untraced), f"{untraced.name} #{untraced.attributes} has a parent"
    trace_ids = [s.context.trace_id for s in runs]
    assert len(set(trace_ids)) == 4


def test_a_failing_job_records_the_exception_and_error_status(alias: str, spans: Spans) -> None:
    # rule 14 (trace-never-fails): the exception is recorded and the status set to error, per run.
    job = jobs.fails.enqueue()
    with running_worker(alias):
        wait_until(lambda: _finished(alias, job.id), message="failed job")
    assert _row(alias, job.id).status == "failed"
    runs = spans.of_job(job.id)
    assert [(s.attributes or {})["job.attempt"] for s in runs] == [1, 2]
    assert [(s.attributes or {})["job.outcome"] for s in runs] == ["retrying", "failed"]
    for span in runs:
        assert span.status.status_code == StatusCode.ERROR
        assert span.status.description == "ValueError: card declined"
        (exception,) = [e for e in span.events if e.name == "exception"]
        assert (exception.attributes or {})["exception.type"] == "ValueError"
        assert (exception.attributes or {})["exception.message"] == "card declined"
        assert "raise ValueError" in str((exception.attributes or {})["exception.stacktrace"])


def test_a_row_whose_arguments_cannot_be_read_fails_on_its_span(alias: str, spans: Spans) -> None:
    # rules 14 (trace-never-fails) and 15 (undecodable-row-fails-alone), a row written by hand: the
    # run fails before the body, and the span says why.
    job = jobs.noop.enqueue()
    Job.objects.using(alias).filter(pk=job.id).update(args={"not": "a list"})
    with running_worker(alias):
        wait_until(lambda: _finished(alias, job.id), message="failed job")
    (span,) = spans.of_job(job.id)
    assert span.status.status_code == StatusCode.ERROR
    assert (span.attributes or {})["job.outcome"] == "failed"
    assert event_names(span) == ["job.undecodable"]
    assert (span.events[0].attributes or {})["message"].startswith(
        "arguments cannot be decoded: the stored args are a JSON object, not an array")


def test_a_run_cancelled_from_outside_shows_the_cancelled_event(alias: str, spans: Spans) -> None:
    # rules 3 (lost-lease-cancels) and 14 (trace-never-fails): the job.cancelled event names the
    # cause.
    job = jobs.until_cancelled.enqueue()
    with running_worker(alias, **FAST):
        wait_until(lambda: _row(alias, job.id).status == "running", message="running")
        Job.objects.using(alias).filter(pk=job.id).update(cancel_requested=True)
        wait_until(lambda: _finished(alias, job.id), message="cancelled")
    assert _row(alias, job.id).status == "cancelled"
    (span,) = spans.of_job(job.id)
    assert span.status.status_code == StatusCode.ERROR
    assert (span.attributes or {})["job.outcome"] == "cancelled"
    (event,) = [e for e in span.events if e.name == "job.cancelled"]
    assert (event.attributes or {})["job.cancel_cause"] == "cancel_requested"


def test_a_job_cancelled_before_it_started_has_a_span_saying_so(alias: str, spans: Spans) -> None:
    # rule 14 (trace-never-fails): a claim settled without running its body still shows in the
    # trace.
    job = jobs.noop.enqueue()
    Job.objects.using(alias).filter(pk=job.id).update(cancel_requested=True)
    with running_worker(alias):
        wait_until(lambda: _finished(alias, job.id), message="cancelled")
    (span,) = spans.of_job(job.id)
    assert event_names(span) == ["job.cancelled"]
    assert (span.attributes or {})["job.outcome"] == "cancelled"


def test_a_job_given_up_before_it_ran_has_an_error_span(alias: str, spans: Spans) -> None:
    # rule 14 (trace-never-fails): a delivery past the last attempt (its workers kept dying) fails
    # without running, and its span says so.
    job = jobs.noop.enqueue()
    Job.objects.using(alias).filter(pk=job.id).update(attempt=job.max_attempts)
    with running_worker(alias):
        wait_until(lambda: _finished(alias, job.id), message="given up")
    assert _row(alias, job.id).status == "failed"
    (span,) = spans.of_job(job.id)
    assert event_names(span) == ["job.gave_up"]
    assert span.status.status_code == StatusCode.ERROR
    assert (span.attributes or {})["job.outcome"] == "failed"


def test_a_lost_slot_shows_on_the_run_it_cancelled(alias: str, spans: Spans,
                                                   tmp_path: Path) -> None:
    # rules 8 (lost-slot-cancels) and 14 (trace-never-fails): the run that lost its slot is
    # cancelled (slot_lost) and the job runs again in a new span.
    job = jobs.capped.enqueue(str(tmp_path / "first-run"))
    with running_worker(alias, **FAST):
        wait_until(lambda: Slot.objects.using(alias).filter(
            holder__endswith=f":{job.id}").exists(), message="slot held")
        Slot.objects.using(alias).filter(holder__endswith=f":{job.id}").delete()
        wait_until(lambda: _finished(alias, job.id), message="second run")
    assert _row(alias, job.id).result == "second run"
    lost, again = spans.of_job(job.id)
    (event,) = [e for e in lost.events if e.name == "job.cancelled"]
    assert (event.attributes or {})["job.cancel_cause"] == "slot_lost"
    assert (lost.attributes or {})["job.outcome"] == "slot_lost"
    assert lost.status.status_code == StatusCode.ERROR
    assert (again.attributes or {})["job.outcome"] == "succeeded"


def test_a_parked_unknown_job_is_visible_in_its_trace(alias: str, spans: Spans) -> None:
    # rules 12 (unknown-job-parked) and 14 (trace-never-fails): parked (not failed), child of the
    # trace that queued it.
    with _tracer().start_as_current_span("test.caller") as caller:
        traceparent, tracestate = capture_trace_context()
    (row,) = get_store(alias).enqueue([NewJob(
        name="tracing.no_such_job", queue="default", priority=0, args=[], kwargs={},
        max_attempts=3, traceparent=traceparent, tracestate=tracestate, enqueued_by="deploy")])
    with running_worker(alias):
        wait_until(lambda: JobAttempt.objects.using(alias).filter(job_id=row.id).exists(),
                   message="parked attempt")
    (span,) = spans.of_job(row.id)
    assert span.name == "job.tracing.no_such_job" and span.kind == SpanKind.CONSUMER
    assert parent_id(span) == caller.get_span_context().span_id
    assert span.status.status_code == StatusCode.UNSET  # deploy skew, not a failure
    assert (span.attributes or {})["job.outcome"] == "suspended"
    assert (span.attributes or {})["job.enqueued_by"] == "deploy"
    (event,) = [e for e in span.events if e.name == "job.parked"]
    assert (event.attributes or {})["reason"] == 'no job registered as "tracing.no_such_job"'
    assert _row(alias, row.id).status == "queued"


def test_each_durable_step_is_a_child_span_replayed_on_the_retry(alias: str,
                                                                 spans: Spans) -> None:
    # rule 14 (trace-never-fails): each durable step gets a child span; a replayed one says so.
    job = jobs.steps.enqueue()
    with running_worker(alias):
        wait_until(lambda: _finished(alias, job.id), message="steps job")
    assert _row(alias, job.id).result == ["1", "2", "3"]
    first, retry = spans.of_job(job.id)

    def steps(run: object) -> list[tuple[str, bool]]:
        return [(s.name, (s.attributes or {})["job.step.replayed"]) for s in spans.children(run)]

    assert steps(first) == [("step one", False), ("step two", False)]
    assert steps(retry) == [("step one", True), ("step two", True), ("step three", False)]
    for run in (first, retry):
        for step in spans.children(run):
            assert step.context.trace_id == run.context.trace_id
            assert (step.attributes or {})["job.step.name"] == step.name.removeprefix("step ")
            assert (step.attributes or {})["job.name"] == "tracing_steps"
    assert first.status.status_code == StatusCode.ERROR
    assert retry.status.status_code == StatusCode.UNSET
