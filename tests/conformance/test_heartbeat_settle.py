"""Heartbeat and settle, on both engines: every write fenced on the claim's token
(rules 1 (leased-claim) to 4 (fenced-settle))."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from django_ultjobs.models import ON_ROW_ID, AttemptRecord, Job, JobAttempt
from django_ultjobs.store import ClaimedJob, JobStore
from django_ultjobs.store.attempts import history
from tests.doubles import FakeClock

from .helpers import claim, enqueue, new_job, row, settlement

# available_apps: between tests, flush only the queue's tables and skip re-creating every
# app's permissions and content types (the suite runs ~5x faster).
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


def _attempts(alias: str, job_id: int) -> list[tuple[int, str, str]]:
    return list(history(job_id, using=alias).values_list("attempt", "worker_id", "outcome"))


def _redelivered(cstore: JobStore, clock: FakeClock) -> tuple[ClaimedJob, ClaimedJob]:
    """One job claimed by w1, lapsed, and claimed again by w2: (w1's claim, w2's claim)."""
    enqueue(cstore, new_job())
    (stale,) = claim(cstore, "w1", timeout=10)
    clock.advance(10)
    (current,) = claim(cstore, "w2", timeout=10)
    assert current.id == stale.id and current.token != stale.token
    return stale, current


# -- heartbeat ------------------------------------------------------------------------------------


# rule 1 (leased-claim)
def test_heartbeat_extends_the_lease_of_the_right_token(cstore: JobStore, clock: FakeClock,
                                                        alias: str) -> None:
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore, timeout=10)
    clock.advance(9)
    assert cstore.heartbeat([(job.id, job.token)], 10) == {job_id: False}
    assert row(alias, job_id).visible_at == clock.now + timedelta(seconds=10)
    clock.advance(9)
    assert claim(cstore, "w2") == []  # the heartbeat kept it invisible past the first timeout
    clock.advance(1)
    assert [j.id for j in claim(cstore, "w2")] == [job_id]


# rules 2 (heartbeat-retried), 3 (lost-lease-cancels)
def test_heartbeat_with_a_wrong_token_is_an_explicit_no(cstore: JobStore, clock: FakeClock,
                                                        alias: str) -> None:
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore, timeout=10)
    before = row(alias, job_id).visible_at
    clock.advance(5)
    assert cstore.heartbeat([(job_id, str(uuid.uuid4()))], 10) == {}
    assert row(alias, job_id).visible_at == before
    assert cstore.heartbeat([(job_id + 1000, job.token)], 10) == {}


def test_heartbeat_of_a_redelivered_job_answers_no_to_the_stale_worker(
    cstore: JobStore, clock: FakeClock, alias: str
) -> None:  # rules 2 (heartbeat-retried), 3 (lost-lease-cancels)
    stale, current = _redelivered(cstore, clock)
    expires = row(alias, current.id).visible_at
    answer = cstore.heartbeat([(stale.id, stale.token)], 60)
    assert answer == {}
    assert stale.id not in answer  # absent: the caller reads this as lost, not as an error
    assert row(alias, current.id).visible_at == expires  # w2's lease is untouched
    assert cstore.heartbeat([(current.id, current.token)], 10) == {current.id: False}


def test_heartbeat_batch_answers_per_run(cstore: JobStore, clock: FakeClock) -> None:
    stale, _ = _redelivered(cstore, clock)
    enqueue(cstore, new_job())
    (other,) = claim(cstore, "w1")
    answer = cstore.heartbeat([(stale.id, stale.token), (other.id, other.token)], 10)
    assert answer == {other.id: False}
    assert cstore.heartbeat([], 10) == {}


def test_heartbeat_returns_the_cancel_requested_flag(cstore: JobStore, alias: str) -> None:
    first, second = enqueue(cstore, new_job(), new_job())
    jobs = claim(cstore)
    runs = [(j.id, j.token) for j in jobs]
    assert cstore.heartbeat(runs, 10) == {first: False, second: False}
    Job.objects.using(alias).filter(id=second).update(cancel_requested=True)
    assert cstore.heartbeat(runs, 10) == {first: False, second: True}


def test_heartbeat_after_settle_is_a_no(cstore: JobStore) -> None:
    enqueue(cstore, new_job())
    (job,) = claim(cstore)
    assert cstore.settle([settlement(job)], "w1") == {job.id}
    assert cstore.heartbeat([(job.id, job.token)], 10) == {}


# -- settle ---------------------------------------------------------------------------------------


def test_settle_succeeded_records_the_attempt(cstore: JobStore, clock: FakeClock,
                                              alias: str) -> None:
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore, "w1", timeout=10)
    clock.advance(2)
    applied = cstore.settle([settlement(job, result_json='{"n":[1,2]}')], "w1")
    assert applied == {job_id}
    stored = row(alias, job_id)
    assert (stored.status, stored.attempt, stored.result, stored.claim_token) == (
        "succeeded", 1, {"n": [1, 2]}, None)
    assert stored.finished_at == clock.now
    (attempt,) = history(job_id, using=alias)
    assert (attempt.attempt, attempt.worker_id, attempt.outcome, attempt.error) == (
        1, "w1", "succeeded", "")
    assert (attempt.started_at, attempt.finished_at) == (job.claimed_at, clock.now)
    assert (attempt.slot_key, attempt.slot) == ("", None)
    # A first attempt that succeeded plainly is held by the job's row: no row of its own
    # (rule 97 (attempt-on-row)).
    assert (attempt.id, stored.attempt_on_row) == (ON_ROW_ID + job_id, True)
    assert not JobAttempt.objects.using(alias).filter(job_id=job_id).exists()


def test_settle_failed_keeps_the_error_and_the_slot(cstore: JobStore, alias: str) -> None:
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore)
    error = "Traceback (most recent call last):\n  ...\nRuntimeError: boom ✗"
    assert cstore.settle([settlement(job, "failed", outcome="failed", error=error,
                                     slot_key="job:add", slot=1)], "w1") == {job_id}
    stored = row(alias, job_id)
    assert (stored.status, stored.last_error) == ("failed", error)
    (attempt,) = JobAttempt.objects.using(alias).filter(job_id=job_id)
    assert (attempt.outcome, attempt.error, attempt.slot_key, attempt.slot) == (
        "failed", error, "job:add", 1)


def test_settle_without_an_outcome_records_no_attempt(cstore: JobStore, alias: str) -> None:
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore)
    assert cstore.settle([settlement(job, "queued", outcome=None, attempt_delta=-1)],
                         "w1") == {job_id}
    assert _attempts(alias, job_id) == []


def test_a_stale_settle_changes_nothing(cstore: JobStore, clock: FakeClock,
                                        alias: str) -> None:  # rule 4 (fenced-settle)
    stale, current = _redelivered(cstore, clock)
    before = row(alias, current.id)
    applied = cstore.settle([settlement(stale, "failed", outcome="failed", error="late")], "w1")
    assert applied == set()
    after = row(alias, current.id)
    assert (after.status, after.attempt, after.worker_id, after.claim_token, after.last_error,
            after.visible_at, after.finished_at) == (
        "running", 2, "w2", uuid.UUID(current.token), "", before.visible_at, None)
    assert _attempts(alias, current.id) == []
    # The current holder settles normally afterwards.
    assert cstore.settle([settlement(current)], "w2") == {current.id}
    assert _attempts(alias, current.id) == [(2, "w2", "succeeded")]


# rule 4 (fenced-settle)
def test_a_settle_batch_applies_only_the_rows_it_still_owns(cstore: JobStore,
                                                            clock: FakeClock,
                                                            alias: str) -> None:
    stale, _ = _redelivered(cstore, clock)
    enqueue(cstore, new_job())
    (mine,) = claim(cstore, "w1")
    applied = cstore.settle([settlement(stale), settlement(mine)], "w1")
    assert applied == {mine.id}
    assert row(alias, stale.id).status == "running"
    assert row(alias, mine.id).status == "succeeded"
    assert _attempts(alias, stale.id) == []
    assert _attempts(alias, mine.id) == [(1, "w1", "succeeded")]


# rule 4 (fenced-settle)
def test_settling_twice_applies_once(cstore: JobStore, alias: str) -> None:
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore)
    assert cstore.settle([settlement(job)], "w1") == {job_id}
    assert cstore.settle([settlement(job, "failed", outcome="failed")], "w1") == set()
    assert row(alias, job_id).status == "succeeded"
    assert _attempts(alias, job_id) == [(1, "w1", "succeeded")]
    assert cstore.settle([], "w1") == set()


def test_settle_refuses_two_settlements_of_one_job(cstore: JobStore, alias: str) -> None:
    # Rule 4 (fenced-settle)'s fence is per row: a batch holding an old and a new run of one job
    # could apply the old outcome under the new token, so the store refuses it and writes nothing.
    (job_id,) = enqueue(cstore, new_job("add"))
    (job,) = claim(cstore, limit=1)
    older = settlement(job, outcome="lease_lost")
    older.token = "00000000-0000-0000-0000-000000000000"
    with pytest.raises(ValueError, match="same job"):
        cstore.settle([older, settlement(job)], "w1")
    assert row(alias, job_id).status == "running"



# rule 4 (fenced-settle)
def test_a_settle_after_a_cancel_from_outside_changes_nothing(cstore: JobStore,
                                                              alias: str) -> None:
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore)
    Job.objects.using(alias).filter(id=job_id).update(status="cancelled", claim_token=None)
    assert cstore.settle([settlement(job)], "w1") == set()
    # rule 3 (lost-lease-cancels): the run is cancelled
    assert cstore.heartbeat([(job.id, job.token)], 10) == {}
    assert row(alias, job_id).status == "cancelled"


def test_attempt_delta_minus_one_hands_the_attempt_back(cstore: JobStore, clock: FakeClock,
                                                        alias: str) -> None:
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore)
    assert job.attempt == 1
    cstore.settle([settlement(job, "queued", outcome="suspended", attempt_delta=-1)], "w1")
    assert row(alias, job_id).attempt == 0
    (again,) = claim(cstore, "w2")
    assert again.attempt == 1
    assert _attempts(alias, job_id) == [(1, "w1", "suspended")]


def test_a_retry_with_delay_is_invisible_until_due(cstore: JobStore, clock: FakeClock,
                                                   alias: str) -> None:
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore, timeout=600)
    assert cstore.settle([settlement(job, "queued", outcome="retrying", delay=30, error="e")],
                         "w1") == {job_id}
    stored = row(alias, job_id)
    assert (stored.status, stored.attempt, stored.last_error, stored.claim_token) == (
        "queued", 1, "e", None)
    assert stored.visible_at == clock.now + timedelta(seconds=30)
    assert stored.finished_at is None
    assert claim(cstore, "w2") == []
    clock.advance(29.999)
    assert claim(cstore, "w2") == []
    clock.advance(0.001)
    (retried,) = claim(cstore, "w2")
    assert (retried.id, retried.attempt, retried.redelivered_from) == (job_id, 2, None)


def test_a_cancel_request_outlives_a_retry_and_is_cleared_by_a_finish(cstore: JobStore,
                                                                      alias: str) -> None:
    # A cancel request that arrives while a run ends some other way (a retry, a wait, a
    # hand-back) must not be forgotten: the next claim sees it and cancels instead of running.
    first, second, third = enqueue(cstore, new_job(), new_job(), new_job())
    Job.objects.using(alias).update(cancel_requested=True)
    jobs = {j.id: j for j in claim(cstore)}
    cstore.settle([settlement(jobs[first], "queued", outcome="retrying"),
                   settlement(jobs[second], "cancelled", outcome="cancelled"),
                   settlement(jobs[third], "succeeded", outcome="succeeded")], "w1")
    assert row(alias, first).cancel_requested is True
    assert row(alias, second).cancel_requested is True
    assert row(alias, third).cancel_requested is False
    (again,) = claim(cstore)
    assert again.id == first and again.cancel_requested is True


def test_an_error_text_the_database_cannot_hold_does_not_poison_the_batch(
    cstore: JobStore, alias: str
) -> None:
    # A traceback may carry anything a job put in an exception message; the settle batch it
    # travels in also carries other jobs' outcomes, and must still be written.
    first, second = enqueue(cstore, new_job(), new_job())
    jobs = {j.id: j for j in claim(cstore)}
    error = "ValueError: bad byte \x00 and lone surrogate \udc80"
    applied = cstore.settle([settlement(jobs[first], "failed", outcome="failed", error=error),
                             settlement(jobs[second])], "w1")
    assert applied == {first, second}
    # Spelt out as escapes, the same text on both engines.
    expected = "ValueError: bad byte \\x00 and lone surrogate \\udc80"
    assert row(alias, first).last_error == expected
    (attempt,) = JobAttempt.objects.using(alias).filter(job_id=first)
    assert attempt.error == expected
    assert row(alias, second).status == "succeeded"


def test_a_large_settle_batch_records_each_attempt_from_its_own_row(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:  # rule 4 (fenced-settle)
    # Out of id order, each run with its own outcome, error and start: the attempt rows are
    # written from the rows the statement settled, and none may take another run's facts.
    enqueue(cstore, *[new_job() for _ in range(120)])
    jobs = []
    for _ in range(4):
        jobs += claim(cstore, "w1", limit=30)
        clock.advance(1)
    outcomes = []
    for n, job in enumerate(reversed(jobs)):
        if n % 3 == 0:
            outcomes.append(settlement(job, "failed", outcome="failed", error=f"e{job.id}"))
        elif n % 3 == 1:
            outcomes.append(settlement(job, "queued", outcome="retrying", error=f"r{job.id}",
                                       delay=5.0))
        else:
            outcomes.append(settlement(job, result_json=str(job.id)))
    assert cstore.settle(outcomes, "w1") == {job.id for job in jobs}
    recorded = {a.job_id: a for a in AttemptRecord.objects.using(alias).all()}
    assert len(recorded) == len(jobs)
    # The successes, first attempts with no slot and no steps, are held by their jobs' rows;
    # every other outcome has its row (rule 97 (attempt-on-row)).
    stored = set(JobAttempt.objects.using(alias).values_list("job_id", flat=True))
    assert stored == {s.job_id for s in outcomes if s.outcome != "succeeded"}
    for s in outcomes:
        a = recorded[s.job_id]
        assert (a.attempt, a.outcome, a.error, a.started_at, a.worker_id) == (
            s.attempt_no, s.outcome, s.error or "", s.started_at, "w1")
        assert row(alias, s.job_id).status == s.status
