"""Acceptance: batches and chains run by real ``runjobworker`` processes SIGKILLed at random, on
real PostgreSQL (rules 110 (released-in-settle) to 113 (constant-bookkeeping)): every callback is
released exactly once, never before its
batch's last member finished, and every chain runs in order, however many runs were killed."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

from django_ultjobs import Batch, chain
from django_ultjobs.models import AttemptRecord, Job
from tests.conftest import WorkerProcesses
from tests.testapp.jobs import clocked
from tests.testapp.models import RunLog

from .fleet import Fleet

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]

BATCHES, MEMBERS, CHAINS, LINKS = 12, 8, 8, 4


def _ended(alias: str, job_id: int) -> list[RunLog]:
    """The runs of ``job_id`` whose body finished (not unwound, not killed)."""
    return [r for r in RunLog.objects.using(alias).filter(job_id=job_id)
            if r.ended_at is not None and not r.label.endswith(":unwound")]


def test_callbacks_and_chains_survive_sigkill_churn(pg_alias: str,
                                                    worker_processes: WorkerProcesses) -> None:
    # rules 110 (released-in-settle) to 113 (constant-bookkeeping) with real worker processes and
    # SIGKILL
    rng = random.Random(20261207)
    fleet = Fleet(worker_processes, pg_alias)
    workers = [fleet.start(f"W{i}", "--threads", "4") for i in range(3)]
    fleet.wait_registered(*workers)
    batches = []
    for b in range(BATCHES):
        with Batch(on_success=clocked.call(label=f"cb{b}"),
                   on_finish=clocked.call(label=f"fin{b}")) as batch:
            clocked.bulk_enqueue([clocked.call(label=f"b{b}", seconds=0.15)
                                  for _ in range(MEMBERS)])
        batches.append(batch)
    chains = [chain(*(clocked.call(label=f"c{c}.{i}", seconds=0.1) for i in range(LINKS)))
              .enqueue() for c in range(CHAINS)]
    # Churn: a random worker SIGKILLed and replaced every 0.7 s while the work drains.
    for n in range(6):
        time.sleep(0.7)
        victim = rng.choice([w for w in workers if fleet.by_id[w].poll() is None])
        worker_processes.kill(fleet.by_id[victim])
        workers.append(fleet.start(f"R{n}", "--threads", "4"))
    every = [j for b in batches for j in [*b.member_ids, *b.callback_ids.values()]]
    every += [j for run in chains for j in run.job_ids]
    jobs = Job.objects.using(pg_alias).filter(id__in=every)
    fleet.wait(lambda: jobs.filter(status="succeeded").count() == len(every), 120,
               f"{len(every)} jobs to succeed")

    for batch in batches:
        last_member = max(r.ended_at for m in batch.member_ids for r in _ended(pg_alias, m))
        for callback in batch.callback_ids.values():
            runs = RunLog.objects.using(pg_alias).filter(job_id=callback)
            assert min(r.started_at for r in runs) >= last_member, "a callback fired early"
            succeeded = AttemptRecord.objects.using(pg_alias).filter(
                job_id=callback, outcome="succeeded")
            # One success; its body may also have ended in an attempt SIGKILLed before its
            # settle (at-least-once), which the fence recorded as no success.
            assert succeeded.count() == 1 and _ended(pg_alias, callback)
    for run in chains:
        for before, after in zip(run.job_ids, run.job_ids[1:], strict=False):
            done = max(r.ended_at for r in _ended(pg_alias, before))
            started = RunLog.objects.using(pg_alias).filter(job_id=after)
            assert min(r.started_at for r in started) >= done, "a chain ran out of order"
    finished = Counter(AttemptRecord.objects.using(pg_alias).filter(
        job_id__in=every, outcome="succeeded").values_list("job_id", flat=True))
    assert set(finished.values()) == {1} and len(finished) == len(every)
    assert fleet.events("jobs.worker.redelivered"), "no run was killed: the churn proved nothing"
