"""The test helpers (rule 74 (run-jobs-real-path)) on both engines, inside a TestCase-style
transaction (the default ``django_db``) and with ``transaction=True``."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, connections
from django.test import Client

from django_ultjobs import job
from django_ultjobs.models import AttemptRecord, Job, JobStatus
from django_ultjobs.runtime.context import JobContext
from django_ultjobs.signals import job_finished
from django_ultjobs.testing import (
    assert_enqueued,
    assert_not_enqueued,
    run_jobs,
)
from example_project.shop.jobs import charge_card, flaky_export, send_receipt
from example_project.shop.models import Order
from tests.testapp.models import RunLog


@job(name="th_add", max_attempts=1)
def th_add(a: int, b: int) -> int:
    return a + b


@job(name="th_fan_out", max_attempts=1)
def th_fan_out(n: int) -> int:
    for i in range(n):
        th_add.enqueue(i, 1)
    return n


@job(name="th_flaky", takes_context=True, max_attempts=3, backoff=0.0)
def th_flaky(ctx: JobContext) -> int:
    if ctx.attempt < 3:
        raise RuntimeError(f"attempt {ctx.attempt} fails")
    return ctx.attempt


@job(name="th_slow_retry", max_attempts=3, backoff=60.0)
def th_slow_retry() -> None:
    raise RuntimeError("always")


@job(name="th_backoff", max_attempts=2, backoff=0.1)
def th_backoff() -> None:
    raise ConnectionError("the mail server is down")


@job(name="th_forever", max_attempts=1)
def th_forever() -> None:
    th_forever.enqueue()


@job(name="th_db_error", takes_context=True, max_attempts=1)
def th_db_error(ctx: JobContext) -> None:
    RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label="before", pid=0)
    RunLog.objects.create(id=RunLog.objects.get(job_id=ctx.job_id).id, job_id=0, attempt=0,
                          label="duplicate", pid=0)


def _outcomes(outcomes: list[Any]) -> list[tuple[str, str | None]]:
    return [(o.name, o.outcome) for o in outcomes]


@pytest.mark.django_db(databases="__all__")
def test_run_jobs_runs_what_the_jobs_enqueue_inside_the_test_transaction(alias):
    """Rule 74 (run-jobs-real-path): one call runs the job and the three it enqueues, in the test's
    transaction."""
    assert connections[alias].in_atomic_block
    th_fan_out.enqueue(3)
    outcomes = run_jobs()
    assert _outcomes(outcomes) == [("th_fan_out", "succeeded")] + [("th_add", "succeeded")] * 3
    assert sorted(o.result for o in outcomes[1:]) == [1, 2, 3]
    assert not Job.objects.using(alias).exclude(status=JobStatus.SUCCEEDED).exists()
    # Recorded as a worker records them: one attempt row each.
    assert AttemptRecord.objects.using(alias).count() == 4
    assert run_jobs() == []


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_run_jobs_with_transaction_true(alias):
    """The same outside a transaction: every statement commits as a worker's would."""
    assert not connections[alias].in_atomic_block
    th_fan_out.enqueue(2)
    assert _outcomes(run_jobs()) == [("th_fan_out", "succeeded")] + [("th_add", "succeeded")] * 2


@pytest.mark.django_db(databases="__all__")
def test_retries_failures_and_delays(alias):
    """A retry due now runs again in the same call; one whose backoff has not passed does not."""
    th_flaky.enqueue()
    th_slow_retry.enqueue()
    outcomes = run_jobs()
    flaky = [(o.outcome, o.attempt) for o in outcomes if o.name == "th_flaky"]
    assert flaky == [("retrying", 1), ("retrying", 2), ("succeeded", 3)]
    (slow,) = [o for o in outcomes if o.name == "th_slow_retry"]
    assert slow.outcome == "retrying" and slow.status == JobStatus.QUEUED
    assert "always" in slow.error
    assert_enqueued(th_slow_retry, count=1)


@pytest.mark.django_db(databases="__all__")
def test_retries_true_drives_a_job_with_a_backoff_to_its_last_failure(alias):
    """Rule 74 (run-jobs-real-path): inside the test's transaction the database's clock does not
    move on PostgreSQL, so a 0.1 s backoff never passes; retries=True runs every retry at once, to
    the last attempt's failure. A delayed job keeps its time."""
    assert connections[alias].in_atomic_block
    th_backoff.enqueue()
    delayed = th_add.using(delay=3600).enqueue(1, 2)
    outcomes = run_jobs(retries=True)
    assert [(o.name, o.attempt, o.outcome, o.status) for o in outcomes] == [
        ("th_backoff", 1, "retrying", JobStatus.QUEUED),
        ("th_backoff", 2, "failed", JobStatus.FAILED)]
    assert "the mail server is down" in outcomes[-1].error
    assert Job.objects.using(alias).get(pk=outcomes[-1].job_id).status == JobStatus.FAILED
    assert_enqueued(th_add, count=1)
    assert Job.objects.using(alias).get(pk=delayed.id).attempt == 0


@pytest.mark.django_db(databases="__all__")
def test_retries_true_runs_a_retry_an_earlier_call_left_waiting(alias, ultjobs):
    """A retry left queued by a plain run_jobs() runs at once in a later retries=True call,
    only in the queues asked for."""
    th_backoff.enqueue()
    th_backoff.using(queue="other").enqueue()
    assert [o.outcome for o in ultjobs.run()] == ["retrying", "retrying"]
    assert ultjobs.run() == []
    assert [(o.queue, o.outcome) for o in ultjobs.run(queues=["default"], retries=True)] == [
        ("default", "failed")]
    ultjobs.assert_enqueued(th_backoff, queue="other", count=1)


@pytest.mark.django_db(databases="__all__")
def test_retries_true_runs_the_example_shops_flaky_export_to_its_success(alias):
    """The example in testing.md: three attempts, backoff=0.5, in one call."""
    flaky_export.enqueue(7)
    assert [(o.attempt, o.outcome) for o in run_jobs()] == [(1, "retrying")]
    assert [(o.attempt, o.outcome) for o in run_jobs(retries=True)] == [
        (2, "retrying"), (3, "succeeded")]


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_retries_true_with_transaction_true(alias):
    """Outside a transaction too: the backoff would pass in 0.1 s, the call does not wait."""
    th_backoff.enqueue()
    assert [o.outcome for o in run_jobs(retries=True)] == ["retrying", "failed"]


@pytest.mark.django_db(databases="__all__")
def test_a_job_that_enqueues_itself_is_stopped_with_a_clear_error(alias):
    th_forever.enqueue()
    with pytest.raises(AssertionError, match="does a job enqueue itself"):
        run_jobs(limit=5)


@pytest.mark.django_db(databases="__all__")
def test_a_database_error_in_the_body_leaves_the_test_transaction_usable(alias):
    """Inside a TestCase the body runs in a savepoint: its IntegrityError fails the job and
    rolls back to the savepoint, and the test goes on querying."""
    th_db_error.enqueue()
    (outcome,) = run_jobs()
    assert outcome.outcome == "failed" and IntegrityError.__name__ in outcome.error
    assert Job.objects.using(alias).get(pk=outcome.job_id).status == JobStatus.FAILED


@pytest.mark.django_db(databases="__all__")
def test_run_hooks_fire_in_run_jobs(alias):
    seen: list[str | None] = []

    def receiver(sender: Any, outcome: str | None, **kwargs: Any) -> None:
        seen.append(outcome)

    job_finished.connect(receiver, sender=th_add, weak=False)
    try:
        th_add.enqueue(1, 2)
        run_jobs()
    finally:
        job_finished.disconnect(receiver, sender=th_add)
    assert seen == ["succeeded"]


@pytest.mark.django_db(databases="__all__")
def test_assert_enqueued_and_not_enqueued(alias):
    th_add.enqueue(1, 2)
    th_add.enqueue(1, 2)
    th_add.using(queue="other").enqueue(5, b=6)
    assert len(assert_enqueued(th_add)) == 3
    assert_enqueued(th_add, args=[1, 2], count=2)
    assert_enqueued(th_add, args=(5,), kwargs={"b": 6}, queue="other")
    assert_enqueued("th_add", args=[1, 2])
    assert_not_enqueued(th_add, args=[2, 1])
    assert_not_enqueued(th_fan_out)
    with pytest.raises(AssertionError, match=r"th_add\(1, 2\) queued 1 time\(s\), found 2"):
        assert_enqueued(th_add, args=[1, 2], count=1)
    with pytest.raises(AssertionError, match="expected no th_add"):
        assert_not_enqueued(th_add, kwargs={"b": 6})
    with pytest.raises(AssertionError, match=r"Queued th_add jobs: id \d+: args=\[1, 2\]"):
        assert_enqueued(th_add, args=[9, 9])
    run_jobs()
    # Run, they are no longer queued.
    assert_not_enqueued(th_add)


@pytest.mark.django_db(databases="__all__")
def test_a_view_that_enqueues(alias, ultjobs):
    """The documented example: POST the checkout, assert its receipt job, run it and the charge
    it enqueues, and see the order paid."""
    response = Client().post("/shop/checkout/", {"email": "a@example.com", "total_cents": 500})
    assert response.status_code == 201
    order_id = response.json()["order_id"]
    ultjobs.assert_enqueued(send_receipt, args=[order_id], count=1)
    ultjobs.assert_not_enqueued(charge_card)
    outcomes = ultjobs.run()
    assert [(o.name, o.outcome) for o in outcomes] == [
        (send_receipt.name, "succeeded"), (charge_card.name, "succeeded")]
    assert Order.objects.get(pk=order_id).status == Order.Status.PAID

