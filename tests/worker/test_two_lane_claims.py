"""A worker with both lanes (threads and async places) claims each lane apart
(rule 87 (no-claim-beyond-free-places)): the threads' claim, which walks past every queued async
row, rests after it found nothing, and every way a sync job can become runnable still reaches it
at once.

In-process workers on a real database, each with a five-second poll so that anything claimed
within a second was woken, not polled for.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from django_ultjobs import chain
from django_ultjobs.models import AttemptRecord, Job
from django_ultjobs.store import ClaimedJob, JobStore
from django_ultjobs.worker.options import WorkerOptions
from django_ultjobs.worker.worker import WorkerProcess
from tests.conftest import engine_store, running_worker, wait_until
from tests.testapp.jobs import add, async_add, async_sleep, flaky

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

#: Longer than any wait below: a sync job claimed sooner was not found by the poll.
POLL = 5.0


def counting_store(alias: str) -> tuple[JobStore, list[int]]:
    """The engine's store, counting the claims sent for the threads (those that scan the
    kinds neither capped nor async)."""
    threads_claims: list[int] = []
    lock = threading.Lock()

    class Counting(engine_store(alias)):  # type: ignore[misc, valid-type]
        def claim(self, **kwargs: Any) -> Sequence[ClaimedJob]:
            if kwargs.get("uncapped", True):
                with lock:
                    threads_claims.append(1)
            return super().claim(**kwargs)

    return Counting(alias), threads_claims


def succeeded(alias: str, ids: Sequence[int]) -> bool:
    return Job.objects.using(alias).filter(id__in=ids, status="succeeded").count() == len(ids)


def started_after(alias: str, job_id: int, since: Any) -> float:
    """Seconds from ``since`` to the start of job ``job_id``'s first attempt."""
    attempt = AttemptRecord.objects.using(alias).get(job_id=job_id, attempt=1)
    return (attempt.started_at - since).total_seconds()


def test_threads_claim_rests_beside_an_async_backlog(alias: str) -> None:
    # rule 87 (no-claim-beyond-free-places): each freed async place starts a round; the threads'
    # claim goes out with it only until it found nothing, not once per async run.
    if alias != "postgres":
        pytest.skip("SQLite has no notifications: the threads' claim goes out every round")
    ids = async_sleep.bulk_enqueue([(0.02,)] * 300)
    store, threads_claims = counting_store(alias)
    with running_worker(alias, store=store, threads=2, async_concurrency=10,
                        poll_interval=POLL):
        wait_until(lambda: succeeded(alias, ids), timeout=60, message="the async backlog")
    # One claim at start, and one per poll interval or notification; every round was dozens.
    assert len(threads_claims) <= 5, len(threads_claims)


def test_sync_job_enqueued_beside_an_async_backlog_starts_at_once(alias: str) -> None:
    # On PostgreSQL the enqueue's notification ends the rest; on SQLite it never began.
    ids = async_sleep.bulk_enqueue([(0.05,)] * 800)
    with running_worker(alias, threads=2, async_concurrency=10, poll_interval=POLL):
        wait_until(lambda: Job.objects.using(alias).filter(id__in=ids, status="succeeded")
                   .count() >= 50, timeout=60, message="the async drain under way")
        sync = add.enqueue(1, 2)
        wait_until(lambda: succeeded(alias, [sync.id]), timeout=POLL,
                   message="the sync job, before a poll")
        row = Job.objects.using(alias).get(id=sync.id)
        assert started_after(alias, sync.id, row.created_at) < POLL / 2
        assert not succeeded(alias, ids), "the async backlog ended first: the test proves nothing"


def test_sync_dependent_of_an_async_job_starts_at_once(alias: str) -> None:
    # rule 110 (released-in-settle): the settle that releases a sync dependent notifies, and a
    # worker whose threads' claim rests claims it at once.
    backlog = async_sleep.bulk_enqueue([(0.05,)] * 800)
    with running_worker(alias, threads=2, async_concurrency=10, poll_interval=POLL):
        wait_until(lambda: Job.objects.using(alias).filter(id__in=backlog, status="succeeded")
                   .count() >= 50, timeout=60, message="the async drain under way")
        # Ahead of the backlog: its async run settles, releasing the sync one, mid-drain.
        run = chain(async_add.using(priority=10).call(1, 2), add.call(3, 4)).enqueue()
        first, then = run.job_ids
        wait_until(lambda: succeeded(alias, [first, then]), timeout=POLL,
                   message="the chain, before a poll")
        ended = AttemptRecord.objects.using(alias).get(job_id=first).finished_at
        assert started_after(alias, then, ended) < POLL / 2
        assert not succeeded(alias, backlog), "the async backlog ended first: proves nothing"


def test_sync_retry_beside_an_async_backlog_starts_at_once(alias: str) -> None:
    # A zero-backoff retry is due when its settle is written, which no notification tells: the
    # written settle of a run on the threads ends the rest. One at a time, so each retry's
    # settle lands while the threads' claim may rest.
    backlog = async_sleep.bulk_enqueue([(0.05,)] * 1500)
    with running_worker(alias, threads=2, async_concurrency=10, poll_interval=POLL):
        wait_until(lambda: Job.objects.using(alias).filter(id__in=backlog, status="succeeded")
                   .count() >= 50, timeout=60, message="the async drain under way")
        for _ in range(4):
            retried = flaky.enqueue(1)
            wait_until(lambda job_id=retried.id: succeeded(alias, [job_id]), timeout=POLL,
                       message="the retry, before a poll")
            first, second = AttemptRecord.objects.using(alias).filter(
                job_id=retried.id).order_by("attempt")
            assert (second.started_at - first.finished_at).total_seconds() < POLL / 2
        assert not succeeded(alias, backlog), "the async backlog ended first: proves nothing"


def test_sync_job_due_later_waits_no_longer_than_a_poll(alias: str) -> None:
    # A job that becomes due on the clock tells nobody: a worker resting its threads' claim
    # looks again when the rest ends, a poll interval after it began, as an idle worker polls.
    backlog = async_sleep.bulk_enqueue([(0.05,)] * 1500)
    poll = 1.0
    with running_worker(alias, threads=2, async_concurrency=10, poll_interval=poll):
        wait_until(lambda: Job.objects.using(alias).filter(id__in=backlog, status="succeeded")
                   .count() >= 50, timeout=60, message="the async drain under way")
        later = add.using(delay=0.3).enqueue(1, 2)
        row = Job.objects.using(alias).get(id=later.id)
        wait_until(lambda: succeeded(alias, [later.id]), timeout=10, message="the due job")
        assert started_after(alias, later.id, row.visible_at) < 2 * poll
        assert not succeeded(alias, backlog), "the async backlog ended first: proves nothing"


def test_burst_worker_looks_at_the_threads_before_it_ends(alias: str) -> None:
    # A burst worker whose threads' claim rests ends only after a round that sent it: a sync job
    # that became due while the async backlog drained is run, not left behind.
    ids = async_sleep.bulk_enqueue([(0.05,)] * 300)
    later = add.using(delay=0.5).enqueue(1, 2)
    worker = WorkerProcess(WorkerOptions(database=alias, threads=2, async_concurrency=10,
                                         poll_interval=POLL, burst=True))
    worker.run(install_signals=False)
    assert succeeded(alias, [*ids, later.id])
