"""The attempt a job's row holds (rule 97 (attempt-on-row)), on both engines: a first attempt that
succeeded plainly writes no attempt row, every other outcome writes its row as before, and every
reader (the attempts view, ``job.attempts``, rule 32 (landed-never-stale)'s ``settle_landed``, the
prune's counts) reads the same history as if the row had been written."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_ultjobs.core.slot_keys import keyed_slot_key, slot_key_for
from django_ultjobs.models import ON_ROW_ID, AttemptRecord, Job, JobAttempt
from django_ultjobs.store import JobStore, LostAttempt
from django_ultjobs.store.attempts import history
from django_ultjobs.store.retention import prune
from tests.doubles import FakeClock

from .helpers import claim, enqueue, new_job, row, settlement

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


def _history(alias: str, job_id: int) -> list[tuple[int, str, str, bool]]:
    """(attempt, worker, outcome, has a row of its own) of each attempt, oldest first."""
    return [(a.attempt, a.worker_id, a.outcome, a.id < ON_ROW_ID)
            for a in history(job_id, using=alias)]


def _rows(alias: str, job_id: int) -> int:
    return JobAttempt.objects.using(alias).filter(job_id=job_id).count()


def test_a_first_attempt_that_succeeds_is_held_by_the_jobs_row(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:  # rule 97 (attempt-on-row)
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore, "w1")
    clock.advance(3)
    assert cstore.settle([settlement(job, result_json="7")], "w1") == {job_id}
    assert _rows(alias, job_id) == 0
    (attempt,) = Job.objects.using(alias).get(id=job_id).attempts.all()
    assert (attempt.id, attempt.attempt, attempt.worker_id, attempt.outcome, attempt.error,
            attempt.claims, attempt.steps_run, attempt.steps_replayed) == (
        ON_ROW_ID + job_id, 1, "w1", "succeeded", "", 1, [], [])
    assert (attempt.started_at, attempt.finished_at) == (job.claimed_at, clock.now)
    assert attempt.finished_at - attempt.started_at == timedelta(seconds=3)


def test_a_retry_then_a_success_writes_both_rows(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:  # rule 97 (attempt-on-row)
    (job_id,) = enqueue(cstore, new_job())
    (first,) = claim(cstore, "w1")
    assert cstore.settle([settlement(first, "queued", outcome="retrying", error="boom")],
                         "w1") == {job_id}
    (second,) = claim(cstore, "w2")
    assert second.attempt == 2
    assert cstore.settle([settlement(second, result_json="1")], "w2") == {job_id}
    assert _history(alias, job_id) == [(1, "w1", "retrying", True),
                                       (2, "w2", "succeeded", True)]
    assert row(alias, job_id).attempt_on_row is False


# rules 32 (landed-never-stale), 97 (attempt-on-row)
def test_a_success_after_a_lost_lease_writes_its_row(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:
    (job_id,) = enqueue(cstore, new_job())
    (stale,) = claim(cstore, "w1", timeout=10)
    clock.advance(11)
    (current,) = claim(cstore, "w2", timeout=10)
    cstore.record_attempts([LostAttempt(job_id=job_id, attempt=stale.attempt, worker_id="w1",
                                        started_at=stale.claimed_at, outcome="lease_lost",
                                        error="lease lapsed")])
    assert cstore.settle([settlement(stale)], "w1") == set()  # fenced: w1's run is stale
    assert cstore.settle([settlement(current)], "w2") == {job_id}
    assert _history(alias, job_id) == [(1, "w1", "lease_lost", True),
                                       (2, "w2", "succeeded", True)]
    assert cstore.settle_landed([settlement(stale)], "w1") == set()
    assert cstore.settle_landed([settlement(current)], "w2") == {job_id}


@pytest.mark.parametrize("fields", [
    {"slot_key": keyed_slot_key("add", "acct-7"), "slot": 0},
    {"slot_key": slot_key_for("other"), "slot": 0},
    {"slot_key": slot_key_for("add"), "slot": None},
    {"steps_run": ("charge",)},
    {"steps_replayed": ("charge",)},
    {"error": "the body finished anyway", "outcome": "slot_lost"},
    {"error": "the body finished anyway", "outcome": "slot_lost", "slot_key": "job:add",
     "slot": 0},
], ids=["per-key-slot", "another-jobs-slot", "key-without-slot", "steps-run", "steps-replayed",
        "slot-lost", "slot-lost-per-job-slot"])
def test_a_first_success_with_more_than_the_row_says_writes_its_row(
        cstore: JobStore, alias: str, fields: dict) -> None:  # rule 97 (attempt-on-row)
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore, "w1")
    assert cstore.settle([settlement(job, result_json="1", **fields)], "w1") == {job_id}
    assert _rows(alias, job_id) == 1
    assert (row(alias, job_id).attempt_on_row, row(alias, job_id).attempt_slot) == (False, None)
    (attempt,) = history(job_id, using=alias)
    assert attempt.id < ON_ROW_ID and attempt.outcome == fields.get("outcome", "succeeded")
    assert (attempt.slot_key, attempt.slot) == (fields.get("slot_key", ""), fields.get("slot"))


def test_a_first_success_in_a_per_job_slot_is_held_by_the_jobs_row(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:  # rule 97 (attempt-on-row)
    # A run of a job with @job(concurrency=...) held one of its job's fleet slots: the row
    # keeps the slot's number, the view builds its key from the job's name.
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore, "w1")
    clock.advance(3)
    done = settlement(job, result_json="7", slot_key=slot_key_for("add"), slot=5)
    assert done.on_row
    assert cstore.settle([done], "w1") == {job_id}
    assert _rows(alias, job_id) == 0
    assert (row(alias, job_id).attempt_on_row, row(alias, job_id).attempt_slot) == (True, 5)
    (attempt,) = Job.objects.using(alias).get(id=job_id).attempts.all()
    assert (attempt.id, attempt.attempt, attempt.worker_id, attempt.outcome, attempt.error,
            attempt.slot_key, attempt.slot, attempt.claims, attempt.steps_run,
            attempt.steps_replayed) == (
        ON_ROW_ID + job_id, 1, "w1", "succeeded", "", "job:add", 5, 1, [], [])
    assert (attempt.started_at, attempt.finished_at) == (job.claimed_at, clock.now)
    assert cstore.settle_landed([done], "w1") == {job_id}
    # A filter on the slot finds the held attempt too (through the key the view builds).
    assert list(AttemptRecord.objects.using(alias).filter(slot_key="job:add", slot=5)
                .values_list("job_id", flat=True)) == [job_id]


def test_a_held_attempt_reads_as_the_row_it_saves_would(
        cstore: JobStore, alias: str) -> None:  # rule 97 (attempt-on-row)
    # The same first success, once held by its job's row and once written as a row (another
    # worker settles it: the row's worker is the claim's), reads the same but for the worker.
    enqueue(cstore, new_job(), new_job())
    held, written = sorted(claim(cstore, "w1"), key=lambda j: j.id)
    key = slot_key_for("add")
    assert cstore.settle([settlement(held, slot_key=key, slot=3)], "w1") == {held.id}
    assert cstore.settle([settlement(written, slot_key=key, slot=3)], "w2") == {written.id}
    (on_row,) = history(held.id, using=alias)
    (own,) = history(written.id, using=alias)
    assert on_row.id >= ON_ROW_ID > own.id
    facts = ("attempt", "outcome", "error", "slot_key", "slot", "steps_run", "steps_replayed",
             "claims")
    assert [getattr(on_row, f) for f in facts] == [getattr(own, f) for f in facts]


# rule 97 (attempt-on-row)
def test_the_views_columns_keep_the_attempt_tables_types(alias: str) -> None:
    # On PostgreSQL a column of another type keeps the view's second half a sorted subquery.
    if alias != "postgres":
        pytest.skip("column types are PostgreSQL's")
    from django.db import connections
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) "
            "FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid "
            "WHERE c.relname IN ('django_ultjobs_attemptrecord', 'django_ultjobs_jobattempt') "
            "AND a.attname IN ('slot_key', 'slot') ORDER BY 1, 2")
        types = cursor.fetchall()
    assert {(name, t) for _, name, t in types if _ == "django_ultjobs_attemptrecord"} == {
        (name, t) for _, name, t in types if _ == "django_ultjobs_jobattempt"}
    assert len(types) == 4


def test_a_success_after_a_hand_back_follows_the_hand_backs_row(
        cstore: JobStore, alias: str) -> None:  # rule 97 (attempt-on-row)
    # A hand-back (shutdown, lost slot) returns the attempt: the next run is attempt 1 again.
    (job_id,) = enqueue(cstore, new_job())
    (first,) = claim(cstore, "w1")
    assert cstore.settle([settlement(first, "queued", outcome="interrupted",
                                     attempt_delta=-1)], "w1") == {job_id}
    (again,) = claim(cstore, "w2")
    assert again.attempt == 1
    assert cstore.settle([settlement(again)], "w2") == {job_id}
    assert _history(alias, job_id) == [(1, "w1", "interrupted", True),
                                       (1, "w2", "succeeded", False)]


def test_a_batch_writes_rows_for_all_but_its_first_successes(
        cstore: JobStore, alias: str) -> None:  # rules 4 (fenced-settle), 97 (attempt-on-row)
    ids = enqueue(cstore, *[new_job() for _ in range(6)])
    jobs = sorted(claim(cstore, "w1"), key=lambda j: j.id)
    stale = jobs[5]
    claim_again = Job.objects.using(alias).filter(id=stale.id)
    claim_again.update(claim_token="00000000-0000-0000-0000-000000000001")
    outcomes = [settlement(jobs[0]), settlement(jobs[1], "failed", outcome="failed", error="e"),
                settlement(jobs[2]),
                settlement(jobs[3], slot_key=keyed_slot_key("add", "k"), slot=1),
                settlement(jobs[4], "queued", outcome="retrying", error="r"),
                settlement(stale)]
    assert cstore.settle(outcomes, "w1") == set(ids[:5])
    assert set(JobAttempt.objects.using(alias).values_list("job_id", flat=True)) == {
        ids[1], ids[3], ids[4]}
    on_row = set(Job.objects.using(alias).filter(attempt_on_row=True).values_list("id",
                                                                                  flat=True))
    assert on_row == {ids[0], ids[2]}
    # The view reads five attempts, one per settled run, and nothing for the stale one.
    assert sorted(AttemptRecord.objects.using(alias).values_list("job_id", flat=True)) == ids[:5]


# rules 32 (landed-never-stale), 97 (attempt-on-row)
def test_a_landed_settle_held_by_the_row_is_never_called_stale(
        cstore: JobStore, clock: FakeClock) -> None:
    enqueue(cstore, new_job(), new_job())
    landed, other = claim(cstore, "w1")
    done = settlement(landed)
    assert done.on_row
    assert cstore.settle([done], "w1") == {landed.id}
    assert cstore.settle_landed([done, settlement(other)], "w1") == {landed.id}
    assert cstore.settle_landed([done], "w2") == set()
    # The same job and attempt, from another claim (another start): not this settle.
    later = settlement(landed)
    moved = type(later)(**{**{f: getattr(later, f) for f in later.__dataclass_fields__},
                           "started_at": landed.claimed_at + timedelta(seconds=1)})
    assert cstore.settle_landed([moved], "w1") == set()


def test_a_prune_counts_the_attempts_the_rows_hold(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:  # rule 97 (attempt-on-row)
    ids = enqueue(cstore, new_job(), new_job())
    plain, failing = sorted(claim(cstore, "w1"), key=lambda j: j.id)
    assert cstore.settle([settlement(plain), settlement(failing, "failed", outcome="failed",
                                                        error="e")], "w1") == set(ids)
    Job.objects.using(alias).update(finished_at=clock.now - timedelta(days=30))
    assert prune(older_than=timedelta(days=1), using=alias, dry_run=True).attempts == 2
    assert prune(older_than=timedelta(days=1), using=alias).attempts == 2
    assert not AttemptRecord.objects.using(alias).exists()


def test_a_settle_by_another_worker_than_the_claims_writes_its_row(
        cstore: JobStore, alias: str) -> None:  # rule 97 (attempt-on-row)
    # Never so under a worker (the claim's token is its own), but a store call may name any
    # worker: the row holds the claim's, so the attempt keeps the settle's in a row of its own.
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore, "w1")
    assert cstore.settle([settlement(job)], "w2") == {job_id}
    assert row(alias, job_id).attempt_on_row is False
    assert _history(alias, job_id) == [(1, "w2", "succeeded", True)]
