"""Claim, on both engines: which rows, in what order, how many, and re-delivery
(rule 1 (leased-claim))."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest

from django_ultjobs.models import Job
from django_ultjobs.store import ClaimedJob, JobStore, NewJob
from tests.doubles import FakeClock

from .helpers import claim, enqueue, new_job, row, settlement

# available_apps: between tests, flush only the queue's tables and skip re-creating every
# app's permissions and content types (the suite runs ~5x faster).
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


def _ids(jobs: list) -> list[int]:
    return [j.id for j in jobs]


def test_claim_takes_only_the_requested_queues(cstore: JobStore) -> None:
    a, b, c = enqueue(cstore, new_job(queue="a"), new_job(queue="b"), new_job(queue="c"))
    assert claim(cstore, queues=["x"]) == []
    assert sorted(_ids(claim(cstore, queues=["a", "c"]))) == [a, c]
    assert claim(cstore, queues=["a", "c"]) == []
    assert _ids(claim(cstore, queues=["b"])) == [b]


def test_claim_order_is_priority_then_visible_at_then_id(cstore: JobStore,
                                                         clock: FakeClock) -> None:
    earlier = clock.now - timedelta(seconds=10)
    low_1, low_2 = enqueue(cstore, new_job("low1"), new_job("low2"))
    high = enqueue(cstore, new_job("high", priority=5))[0]
    negative = enqueue(cstore, new_job("negative", priority=-5, run_at=earlier))[0]
    low_early = enqueue(cstore, new_job("low-early", run_at=earlier))[0]
    order = [claim(cstore, limit=1) for _ in range(6)]
    assert [_ids(jobs) for jobs in order] == [[high], [low_early], [low_1], [low_2], [negative],
                                              []]


def test_one_claim_returns_rows_in_priority_order(cstore: JobStore) -> None:
    ids = enqueue(cstore, new_job(priority=0), new_job(priority=9), new_job(priority=3),
                  new_job(priority=9))
    got = claim(cstore)
    assert [(j.id, j.priority) for j in got] == [(ids[1], 9), (ids[3], 9), (ids[2], 3),
                                                 (ids[0], 0)]


def test_claim_never_returns_a_job_twice_and_respects_limit(cstore: JobStore) -> None:
    ids = enqueue(cstore, *(new_job() for _ in range(10)))
    assert claim(cstore, limit=0) == []
    first = claim(cstore, "w1", limit=4)
    second = claim(cstore, "w2", limit=4)
    third = claim(cstore, "w3", limit=4)
    assert (len(first), len(second), len(third)) == (4, 4, 2)
    assert sorted(_ids(first + second + third)) == ids
    assert claim(cstore, "w4") == []
    # Each claim is one token, distinct from every other claim's.
    tokens = {j.token for j in first} | {j.token for j in second} | {j.token for j in third}
    assert len(tokens) == 3


def test_a_claimed_row_is_running_under_the_token_until_now_plus_timeout(
    cstore: JobStore, clock: FakeClock, alias: str
) -> None:  # rule 1 (leased-claim)
    (job_id,) = enqueue(cstore, new_job(args=[1, 2], kwargs={"k": "v"}, max_attempts=4,
                                        traceparent="tp", enqueued_by="me"))
    (job,) = claim(cstore, "worker-a", timeout=45.5)
    assert (job.id, job.name, job.queue, job.priority, job.args, job.kwargs) == (
        job_id, "add", "default", 0, [1, 2], {"k": "v"})
    assert (job.attempt, job.max_attempts, job.traceparent, job.enqueued_by) == (1, 4, "tp", "me")
    assert (job.cancel_requested, job.redelivered_from, job.previous_claimed_at, job.woke) == (
        False, None, None, False)
    assert job.claimed_at == clock.now
    stored = row(alias, job_id)
    assert (stored.status, stored.attempt, stored.worker_id) == ("running", 1, "worker-a")
    assert stored.claim_token == uuid.UUID(job.token)
    assert stored.claimed_at == clock.now
    assert stored.visible_at == clock.now + timedelta(seconds=45.5)


def test_claimed_jobs_have_the_same_shape_on_every_engine(cstore: JobStore) -> None:
    enqueue(cstore, new_job())
    (job,) = claim(cstore)
    assert job.token == str(uuid.UUID(job.token))  # the canonical form, on both engines
    assert isinstance(job.cancel_requested, bool)
    assert job.claimed_at.utcoffset() == timedelta(0)
    assert (job.traceparent, job.tracestate, job.enqueued_by) == ("", "", "")


def test_claimed_times_are_the_ones_django_reads(cstore: JobStore, clock: FakeClock,
                                                 alias: str) -> None:  # rule 1 (leased-claim)
    # PostgreSQL's claim loads its times with the driver's own loader, not Django's wrapper of
    # it: each must still be the very datetime the ORM reads from the row, time zone included.
    (job_id,) = enqueue(cstore, NewJob(name="add", queue="default", priority=0, args=[],
                                       kwargs={}, max_attempts=3, expires_in=600.0))
    (first,) = claim(cstore, "w1", timeout=30)
    clock.advance(30)
    (second,) = claim(cstore, "w2", timeout=30)
    stored = row(alias, job_id)
    pairs = [(second.claimed_at, stored.claimed_at), (second.expires_at, stored.expires_at),
             (second.previous_claimed_at, first.claimed_at),
             (first.due_at, stored.created_at)]
    for got, expected in pairs:
        assert (got, got.tzinfo) == (expected, expected.tzinfo)


def test_a_claimed_job_is_the_one_its_dataclass_init_builds(cstore: JobStore, clock: FakeClock
                                                             ) -> None:  # rule 1 (leased-claim)
    # The claim sets each field of a bare ClaimedJob by name: every
    # field must be set, to the value and type the dataclass's own __init__ would hold; fresh,
    # re-delivered and with arguments or without, and no two jobs sharing their argument lists.
    enqueue(cstore, new_job(), NewJob(name="add", queue="default", priority=5, args=[1, "a"],
                                      kwargs={"k": [2]}, max_attempts=3, expires_in=600.0,
                                      traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01",
                                      enqueued_by="user:1", timeout=9.5), new_job())
    first = claim(cstore, "w1", timeout=30)
    clock.advance(30)
    again = claim(cstore, "w2", timeout=30)
    for job in [*first, *again]:
        fields = {f.name: getattr(job, f.name) for f in dataclasses.fields(ClaimedJob)}
        built = ClaimedJob(**fields)
        assert built == job and dataclasses.astuple(built) == dataclasses.astuple(job)
        assert [type(v) for v in fields.values()] == [
            type(getattr(built, name)) for name in fields]
    assert again[0].args == [1, "a"] and again[0].kwargs == {"k": [2]}
    assert again[0].redelivered_from == "w1" and again[1].args is not again[2].args
    assert again[1].kwargs is not again[2].kwargs


def test_a_delayed_job_is_claimed_only_once_due(cstore: JobStore, clock: FakeClock) -> None:
    (job_id,) = enqueue(cstore, new_job(delay=5))
    assert claim(cstore) == []
    clock.advance(4.999)
    assert claim(cstore) == []
    clock.advance(0.001)
    assert _ids(claim(cstore)) == [job_id]


# rule 1 (leased-claim)
def test_a_running_job_is_invisible_until_its_lease_lapses(cstore: JobStore,
                                                           clock: FakeClock) -> None:
    enqueue(cstore, new_job())
    claim(cstore, "w1", timeout=30)
    clock.advance(29.999)
    assert claim(cstore, "w2") == []


# rule 1 (leased-claim)
def test_a_lapsed_lease_is_redelivered_as_a_new_attempt(cstore: JobStore, clock: FakeClock,
                                                        alias: str) -> None:
    (job_id,) = enqueue(cstore, new_job())
    (first,) = claim(cstore, "w1", timeout=30)
    clock.advance(30)
    (second,) = claim(cstore, "w2", timeout=30)
    assert second.id == job_id and second.token != first.token
    assert (second.attempt, second.redelivered_from) == (2, "w1")
    assert second.previous_claimed_at == first.claimed_at
    assert second.claimed_at == clock.now
    stored = row(alias, job_id)
    assert (stored.worker_id, stored.attempt, stored.claim_token) == (
        "w2", 2, uuid.UUID(second.token))
    clock.advance(31)
    (third,) = claim(cstore, "w3")
    assert (third.attempt, third.redelivered_from) == (3, "w2")


def test_a_redelivery_past_max_attempts_is_still_delivered(cstore: JobStore,
                                                           clock: FakeClock) -> None:
    # The claim hands the row out with attempt > max_attempts and the worker decides (fails it):
    # the store itself never drops a row silently.
    enqueue(cstore, new_job(max_attempts=1))
    claim(cstore, "w1", timeout=1)
    clock.advance(1)
    (again,) = claim(cstore, "w2")
    assert (again.attempt, again.max_attempts) == (2, 1)


def test_claim_reports_cancel_requested(cstore: JobStore, alias: str) -> None:
    first, second = enqueue(cstore, new_job(), new_job())
    Job.objects.using(alias).filter(id=second).update(cancel_requested=True)
    got = {j.id: j.cancel_requested for j in claim(cstore)}
    assert got == {first: False, second: True}


def test_finished_rows_are_never_claimed(cstore: JobStore, clock: FakeClock, alias: str) -> None:
    ids = enqueue(cstore, *(new_job() for _ in range(3)))
    jobs = claim(cstore, timeout=1)
    applied = cstore.settle([settlement(j, status, outcome=status) for j, status in
                             zip(jobs, ["succeeded", "failed", "cancelled"], strict=True)], "w1")
    assert applied == set(ids)
    clock.advance(3600)
    assert claim(cstore) == []
    assert sorted(Job.objects.using(alias).values_list("status", flat=True)) == [
        "cancelled", "failed", "succeeded"]


def test_a_waiting_row_wakes_without_counting_an_attempt(cstore: JobStore,
                                                         clock: FakeClock) -> None:
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore)
    assert cstore.settle([settlement(job, "waiting", outcome=None, delay=10)], "w1") == {job_id}
    clock.advance(9.999)
    assert claim(cstore) == []
    clock.advance(0.001)
    (woke,) = claim(cstore, "w2")
    assert (woke.id, woke.attempt, woke.woke, woke.redelivered_from) == (job_id, 1, True, None)
