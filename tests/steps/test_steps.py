"""Durable steps, events and sleep, on SQLite and PostgreSQL (rule 11 (cooperative-cancel) for the
steps' writes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import transaction
from django.db.models import Count

from django_ultjobs import send_event
from django_ultjobs.exceptions import CancelRequestedError, JobCancelledError, StepError
from django_ultjobs.models import Job, JobAttempt, JobStep
from django_ultjobs.runtime.cancel import CancelScope
from django_ultjobs.runtime.steps import StepLedger
from django_ultjobs.store import get_store
from tests.conftest import running_worker, wait_until
from tests.stepsapp.jobs import (
    duplicate_step,
    nap,
    nested_match,
    non_json_step,
    step_then_block,
    three_steps,
    wait_for_order,
    wait_or_timeout,
    wait_paid,
)
from tests.testapp.jobs import add
from tests.testapp.models import RunLog

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def _job(alias: str, job_id: int) -> Job:
    return Job.objects.using(alias).get(pk=job_id)


def _status(alias: str, job_id: int) -> str:
    return Job.objects.using(alias).get(pk=job_id).status


def _finished(alias: str, *ids: int) -> bool:
    return Job.objects.using(alias).filter(
        pk__in=ids, status__in=["succeeded", "failed", "cancelled"]).count() == len(ids)


def _calls(alias: str, job_id: int, label: str) -> int:
    return RunLog.objects.using(alias).filter(job_id=job_id, label=label).count()


def test_retry_replays_completed_steps(alias: str) -> None:
    job = three_steps.enqueue(True)
    with running_worker(alias):
        wait_until(lambda: _finished(alias, job.id))
    job.refresh_from_db()
    assert job.status == "succeeded" and job.attempt == 2
    assert job.result == ["fn:one", "fn:two", "fn:three"]
    # Steps one and two ran once, ever; the retry replayed them.
    assert [_calls(alias, job.id, f"fn:{n}") for n in ("one", "two", "three")] == [1, 1, 1]
    attempts = list(JobAttempt.objects.using(alias).filter(job_id=job.id).order_by("attempt"))
    assert [(a.outcome, a.steps_run, a.steps_replayed) for a in attempts] == [
        ("retrying", ["one", "two"], []),
        ("succeeded", ["three"], ["one", "two"]),
    ]


def test_step_misuse_is_a_clear_error(alias: str) -> None:
    dup, bad = duplicate_step.enqueue(), non_json_step.enqueue()
    with running_worker(alias):
        wait_until(lambda: _finished(alias, dup.id, bad.id))
    dup.refresh_from_db()
    bad.refresh_from_db()
    assert dup.status == "failed" and "step 'same' was used twice" in dup.last_error
    assert bad.status == "failed" and "StepError" in bad.last_error
    assert "stored as JSON" in bad.last_error


def test_no_step_write_past_the_signal(alias: str) -> None:
    # rule 11 (cooperative-cancel): once the run is cancelled, a step neither runs its function nor
    # writes.
    job = add.enqueue(1, 1)
    store = get_store(alias)
    (claimed,) = store.claim(worker_id="w", queues=["default"], limit=1,
                             visibility_timeout=30, caps={})
    scope = CancelScope()
    ledger = StepLedger(store=store, job=claimed, scope=scope)
    assert ledger.step("first", lambda: 1) == 1
    scope.cancel(CancelRequestedError("stop"))
    called = []
    with pytest.raises(JobCancelledError):
        ledger.step("second", lambda: called.append(1))
    with pytest.raises(JobCancelledError):
        ledger.sleep("nap", 5)
    with pytest.raises(JobCancelledError):
        ledger.wait_for_event("evt", None, None)
    assert called == []
    assert list(JobStep.objects.using(alias).filter(job_id=job.id)
                .values_list("name", flat=True)) == ["first"]


def test_step_write_is_fenced_on_the_claim_token(alias: str) -> None:
    # A run whose job was re-claimed cannot record a step for it, and is cancelled.
    add.enqueue(1, 1)
    store = get_store(alias)
    (claimed,) = store.claim(worker_id="w", queues=["default"], limit=1,
                             visibility_timeout=30, caps={})
    Job.objects.using(alias).filter(pk=claimed.id).update(
        claim_token="00000000-0000-0000-0000-000000000001")
    scope = CancelScope()
    ledger = StepLedger(store=store, job=claimed, scope=scope)
    with pytest.raises(JobCancelledError):
        ledger.step("late", lambda: 1)
    assert scope.cancelled
    assert not JobStep.objects.using(alias).filter(job_id=claimed.id).exists()


def test_wait_for_event_frees_the_thread_and_wakes_on_send(alias: str) -> None:
    waiting = wait_for_order.enqueue(42)
    other = wait_for_order.enqueue(43)
    with running_worker(alias, threads=1):
        wait_until(lambda: _status(alias, waiting.id) == "waiting"
                   and _status(alias, other.id) == "waiting")
        # The single thread is free: an ordinary job still runs.
        quick = add.enqueue(2, 2)
        wait_until(lambda: _finished(alias, quick.id))
        send_event("order.shipped", {"order_id": 42, "carrier": "UPS"})
        wait_until(lambda: _finished(alias, waiting.id))
        assert _status(alias, other.id) == "waiting"
    waiting.refresh_from_db()
    assert waiting.result == {"order_id": 42, "carrier": "UPS"}
    assert waiting.attempt == 1  # waking did not burn an attempt
    assert _calls(alias, waiting.id, "started") == 2  # ran, suspended, replayed
    assert _calls(alias, waiting.id, "fn:after") == 1
    outcomes = list(JobAttempt.objects.using(alias).filter(job_id=waiting.id)
                    .order_by("id").values_list("attempt", "outcome"))
    assert outcomes == [(1, "suspended"), (1, "succeeded")]


def test_event_sent_after_enqueue_but_before_the_wait_counts(alias: str) -> None:
    job = wait_for_order.enqueue(7)
    send_event("order.shipped", {"order_id": 7})
    send_event("order.shipped", {"order_id": 8})
    with running_worker(alias):
        wait_until(lambda: _finished(alias, job.id))
    job.refresh_from_db()
    assert job.status == "succeeded" and job.result == {"order_id": 7}
    # It never had to wait.
    assert _calls(alias, job.id, "started") == 1


def test_event_sent_before_enqueue_does_not_count(alias: str) -> None:
    send_event("order.shipped", {"order_id": 9})
    job = wait_for_order.enqueue(9)
    with running_worker(alias):
        wait_until(lambda: _status(alias, job.id) == "waiting")


def test_event_rolled_back_never_wakes(alias: str) -> None:
    from django.db import transaction

    job = wait_for_order.enqueue(5)
    with running_worker(alias):
        wait_until(lambda: _status(alias, job.id) == "waiting")
        with pytest.raises(RuntimeError), transaction.atomic(using=alias):
            send_event("order.shipped", {"order_id": 5})
            raise RuntimeError("rollback")
        send_event("order.shipped", {"order_id": 6})
        add_job = add.enqueue(1, 2)
        wait_until(lambda: _finished(alias, add_job.id))
        assert _status(alias, job.id) == "waiting"


def test_an_event_sent_with_the_enqueue_is_found_at_once(alias: str) -> None:
    # The job's enqueue time and the event's are compared as times on both engines: compared as
    # text of different precision (microseconds, milliseconds) on SQLite, an event sent in the
    # same millisecond would be missed and the job would wake for ever.
    with transaction.atomic(using=alias):
        job = wait_for_order.enqueue(77)
        send_event("order.shipped", {"order_id": 77})
    with running_worker(alias):
        wait_until(lambda: _finished(alias, job.id))
    assert _status(alias, job.id) == "succeeded"
    assert RunLog.objects.using(alias).filter(job_id=job.id, label="started").count() == 1


def test_a_wait_for_an_event_no_sender_may_name_is_a_clear_error(alias: str) -> None:
    # send_event refuses an empty name or one past 200 characters: a wait on one could only
    # time out, and would be settled as a wait on a name the settle does not lock.
    add.enqueue(1, 1)
    store = get_store(alias)
    (claimed,) = store.claim(worker_id="w", queues=["default"], limit=1,
                             visibility_timeout=30, caps={})
    ledger = StepLedger(store=store, job=claimed, scope=CancelScope())
    for name in ("", "e" * 201, 7):
        with pytest.raises(StepError, match="event name must be a string of 1 to 200 characters"):
            ledger.wait_for_event(name, None, None)
    assert not JobStep.objects.using(alias).filter(job_id=claimed.id).exists()


def test_match_compares_json_values_the_same_on_both_engines(alias: str) -> None:
    job = wait_paid.enqueue()
    bad = nested_match.enqueue()
    send_event("paid", {"paid": 1})           # 1 is not true
    with running_worker(alias):
        wait_until(lambda: _status(alias, job.id) == "waiting" and _finished(alias, bad.id))
        send_event("paid", {"paid": True})
        wait_until(lambda: _finished(alias, job.id))
    assert _job(alias, job.id).result is True or _job(alias, job.id).result == {"paid": True}
    assert "must be a string, number, boolean or None" in _job(alias, bad.id).last_error


def test_wait_timeout_raises_in_the_body(alias: str) -> None:
    job = wait_or_timeout.enqueue(0.3)
    with running_worker(alias):
        wait_until(lambda: _finished(alias, job.id))
    job.refresh_from_db()
    assert job.status == "succeeded" and job.result == "timed out"


def test_durable_sleep(alias: str) -> None:
    job = nap.enqueue(0.4)
    with running_worker(alias, threads=1):
        wait_until(lambda: _status(alias, job.id) == "waiting")
        wait_until(lambda: _finished(alias, job.id))
    job.refresh_from_db()
    assert job.status == "succeeded" and job.result == "rested" and job.attempt == 1
    assert _calls(alias, job.id, "fn:before") == 1
    assert _calls(alias, job.id, "fn:after") == 1


def test_many_waiters_wake_exactly_once(alias: str) -> None:
    # 500 jobs waiting on 500 different events, held by a worker with 2 threads.
    ids = wait_for_order.bulk_enqueue([(n,) for n in range(500)])
    jobs = Job.objects.using(alias).filter(pk__in=ids)
    with running_worker(alias, threads=2):
        wait_until(lambda: jobs.filter(status="waiting").count() == 500, timeout=60)
        quick = add.enqueue(3, 4)
        wait_until(lambda: _finished(alias, quick.id))
        for n in range(500):
            send_event("order.shipped", {"order_id": n})
        wait_until(lambda: jobs.filter(status="succeeded").count() == 500, timeout=90)
    after = RunLog.objects.using(alias).filter(job_id__in=ids, label="fn:after")
    assert after.count() == 500
    assert not after.values("job_id").annotate(n=Count("id")).filter(n__gt=1).exists()
    for job in jobs:
        assert job.result == {"order_id": job.args[0]}


@pytest.mark.acceptance
def test_sigkill_between_steps_resumes_without_repeating(pg_alias: str, worker_processes,
                                                         tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    job = step_then_block.enqueue(str(gate))
    flags = ("--visibility-timeout", "2", "--heartbeat-interval", "0.5", "--poll-interval",
             "0.05")
    first = worker_processes.start(pg_alias, *flags)
    wait_until(lambda: _calls(pg_alias, job.id, "blocking") == 1)
    worker_processes.kill(first)
    gate.touch()
    worker_processes.start(pg_alias, *flags)
    wait_until(lambda: _finished(pg_alias, job.id))
    job.refresh_from_db()
    assert job.status == "succeeded" and job.attempt == 2
    assert _calls(pg_alias, job.id, "fn:one") == 1
    assert _calls(pg_alias, job.id, "fn:two") == 1
