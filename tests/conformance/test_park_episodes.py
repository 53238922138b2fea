"""Parking a job no worker knows, on both engines: one attempt row per episode
(rule 12 (unknown-job-parked)).

The store side of it: ``park_episodes`` finds the episode a claimed job is in (its latest attempt
row, when that is a park of the same attempt), and a settle that ``extends`` it counts one more
claim on that row instead of writing another.
"""

from __future__ import annotations

import uuid

import pytest

from django_ultjobs.models import Job, JobAttempt
from django_ultjobs.store import ClaimedJob, JobStore, ParkEpisode
from django_ultjobs.store.attempts import history
from django_ultjobs.worker.settlements import UNKNOWN_JOB_PREFIX
from tests.doubles import FakeClock

from .helpers import claim, enqueue, new_job, row, settlement

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

ERROR = f'{UNKNOWN_JOB_PREFIX}"gone"'
DAY = 86400.0


def _park(cstore: JobStore, job: ClaimedJob, extends: int | None = None) -> None:
    settled = cstore.settle([settlement(job, "queued", outcome="suspended", attempt_delta=-1,
                                        delay=30.0, error=ERROR, extends=extends)], "w1")
    assert settled == {job.id}


def _attempts(alias: str, job_id: int) -> list[tuple[int, str, int, str]]:
    return list(history(job_id, using=alias)
                .values_list("attempt", "outcome", "claims", "worker_id"))


def test_a_park_that_extends_its_episode_counts_a_claim_instead_of_a_row(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:  # rule 12 (unknown-job-parked)
    (job_id,) = enqueue(cstore, new_job("gone"))
    (first,) = claim(cstore)
    assert cstore.park_episodes([job_id], UNKNOWN_JOB_PREFIX, DAY) == {}
    _park(cstore, first)
    (parked,) = JobAttempt.objects.using(alias).filter(job_id=job_id)
    for n in range(2, 6):
        clock.advance(30)
        (again,) = claim(cstore, f"w{n}")
        assert again.attempt == first.attempt == 1  # parking burns no attempt
        episode = cstore.park_episodes([job_id], UNKNOWN_JOB_PREFIX, DAY)
        assert episode == {job_id: ParkEpisode(job_id=job_id, attempt_id=parked.id, attempt=1,
                                               expired=False)}
        _park(cstore, again, extends=parked.id)
    assert _attempts(alias, job_id) == [(1, "suspended", 5, "w1")]
    latest = JobAttempt.objects.using(alias).get(id=parked.id)
    assert latest.started_at == first.claimed_at  # when the episode began
    assert latest.finished_at == clock.now  # the last park
    assert (row(alias, job_id).status, row(alias, job_id).attempt) == ("queued", 0)


# rule 12 (unknown-job-parked)
def test_an_episode_expires_on_the_database_clock(cstore: JobStore, clock: FakeClock,
                                                  alias: str) -> None:
    (job_id,) = enqueue(cstore, new_job("gone"))
    (job,) = claim(cstore)
    _park(cstore, job)
    clock.advance(99)
    assert not cstore.park_episodes([job_id], UNKNOWN_JOB_PREFIX, 100.0)[job_id].expired
    clock.advance(1)
    assert cstore.park_episodes([job_id], UNKNOWN_JOB_PREFIX, 100.0)[job_id].expired


# rule 12 (unknown-job-parked)
def test_another_outcome_since_the_park_ends_the_episode(cstore: JobStore, clock: FakeClock,
                                                         alias: str) -> None:
    (parked_id, other_id) = enqueue(cstore, new_job("gone"), new_job("gone"))
    for job in claim(cstore):
        _park(cstore, job)
    clock.advance(30)
    # A worker that knew the job ran it and it failed once: the park's row is no longer the
    # latest, so the next park begins a new episode.
    runs = {job.id: job for job in claim(cstore)}
    cstore.settle([settlement(runs[other_id], "queued", outcome="retrying", error="boom")], "w1")
    episodes = cstore.park_episodes([parked_id, other_id], UNKNOWN_JOB_PREFIX, DAY)
    assert set(episodes) == {parked_id}


# rule 12 (unknown-job-parked)
def test_a_park_whose_episode_row_is_gone_records_a_new_one(cstore: JobStore, clock: FakeClock,
                                                           alias: str) -> None:
    (job_id,) = enqueue(cstore, new_job("gone"))
    (job,) = claim(cstore)
    _park(cstore, job)
    (parked,) = JobAttempt.objects.using(alias).filter(job_id=job_id)
    clock.advance(30)
    (again,) = claim(cstore)
    parked.delete()  # pruned by hand between the lookup and the settle
    _park(cstore, again, extends=parked.id)
    assert _attempts(alias, job_id) == [(1, "suspended", 1, "w1")]


def test_a_park_in_a_batch_with_other_outcomes(cstore: JobStore, clock: FakeClock,
                                               alias: str) -> None:  # rule 12 (unknown-job-parked)
    (gone_id, ran_id) = enqueue(cstore, new_job("gone"), new_job())
    (gone,) = [j for j in claim(cstore, limit=1)]
    _park(cstore, gone)
    (parked,) = JobAttempt.objects.using(alias).filter(job_id=gone_id)
    clock.advance(30)
    runs = {job.id: job for job in claim(cstore)}
    settled = cstore.settle([
        settlement(runs[gone_id], "queued", outcome="suspended", attempt_delta=-1, delay=30.0,
                   error=ERROR, extends=parked.id),
        settlement(runs[ran_id], result_json="3"),
    ], "w2")
    assert settled == {gone_id, ran_id}
    assert _attempts(alias, gone_id) == [(1, "suspended", 2, "w2")]
    assert _attempts(alias, ran_id) == [(1, "succeeded", 1, "w2")]


# rules 4 (fenced-settle) and 12 (unknown-job-parked)
def test_one_batch_extends_records_and_skips_each_run_by_its_own_facts(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:
    # One settle statement holding every case at once: an episode to extend, an episode whose
    # row is gone, a stale park that extends (another claim owns its job), a plain success and a
    # settle without an outcome. Each run's attempt row must come from its own batch row.
    ids = enqueue(cstore, *[new_job("gone") for _ in range(3)], new_job(), new_job())
    kept_id, pruned_id, stale_id, ran_id, quiet_id = ids
    for job in claim(cstore, limit=3):
        _park(cstore, job)
    parked = {a.job_id: a for a in JobAttempt.objects.using(alias).filter(job_id__in=ids[:3])}
    clock.advance(30)
    runs = {job.id: job for job in claim(cstore, "w2")}
    parked[pruned_id].delete()
    # Another claim now owns the stale run's job (its token is not the run's).
    Job.objects.using(alias).filter(id=stale_id).update(claim_token=uuid.uuid4())
    park = {"outcome": "suspended", "attempt_delta": -1, "delay": 30.0, "error": ERROR}
    settled = cstore.settle([
        settlement(runs[kept_id], "queued", extends=parked[kept_id].id, **park),
        settlement(runs[pruned_id], "queued", extends=parked[pruned_id].id, **park),
        settlement(runs[stale_id], "queued", extends=parked[stale_id].id, **park),
        settlement(runs[ran_id], result_json="7"),
        settlement(runs[quiet_id], "queued", outcome=None, attempt_delta=-1),
    ], "w2")
    assert settled == {kept_id, pruned_id, ran_id, quiet_id}
    assert _attempts(alias, kept_id) == [(1, "suspended", 2, "w2")]
    assert _attempts(alias, pruned_id) == [(1, "suspended", 1, "w2")]
    assert _attempts(alias, stale_id) == [(1, "suspended", 1, "w1")]  # untouched
    assert _attempts(alias, ran_id) == [(1, "succeeded", 1, "w2")]
    assert _attempts(alias, quiet_id) == []
    assert row(alias, stale_id).status == "running"
