"""A declaration the database cannot hold never reaches a worker; every value accepted runs, on
both engines (rules 16 (bad-input-refused) and 54 (bad-flow-option-refused)).

``@job(concurrency=1.5)`` (or NaN, inf, 2**31, 10**30) used to be accepted, and then every claim
of every worker that registered it failed (``integer out of range`` on PostgreSQL, a datatype
mismatch or malformed JSON on SQLite): plain jobs and periodic ticks stayed queued fleet-wide.
The largest cap PostgreSQL's ``integer`` holds, 2**31 - 1, was accepted too, and its slot
statement then counted every slot up to it, holding SQLite's writer lock for minutes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_ultjobs import JobOptionError, job
from django_ultjobs.core.retry import MAX_DELAY
from django_ultjobs.jobs.options import INT_MAX, INT_MIN
from django_ultjobs.jobs.registry import registered
from django_ultjobs.jobs.spec import JobSpec
from django_ultjobs.models import Job, Worker
from django_ultjobs.testing import unregister
from tests.conftest import WorkerProcesses, events, running_worker, wait_until
from tests.testapp.jobs import add

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

#: Caps the slot table cannot hold, each of which wedged every worker that registered it.
BAD_CAPS = [1.5, math.nan, math.inf, 2**31, 10**30]


def noop(label: str = "") -> str:
    return label


@pytest.fixture
def declare() -> Iterator[Callable[..., JobSpec]]:
    made: list[str] = []

    def make(name: str, **options: Any) -> JobSpec:
        made.append(name)
        return job(name=name, **options)(noop)

    yield make
    for name in made:
        unregister(name)


def _succeeded(alias: str, ids: list[int]) -> Callable[[], bool]:
    return lambda: (Job.objects.using(alias).filter(id__in=ids, status="succeeded").count()
                    == len(ids))


def test_the_largest_values_the_columns_hold_are_accepted_and_run(
        alias: str, declare: Callable[..., JobSpec], caplog: pytest.LogCaptureFixture) -> None:
    # rule 54 (bad-flow-option-refused): 2**31 - 1 fleet slots, per job and per key, claim again and
    # again (each claim offered the slot kept from the run before) beside the largest rate limit,
    # and the other options at their bounds, on both engines, and no claim fails.
    largest = declare("largest", concurrency=INT_MAX, rate_limit=f"{INT_MAX}/s",
                      max_attempts=INT_MAX, priority=INT_MAX, timeout=MAX_DELAY,
                      expires_in=MAX_DELAY, backoff=MAX_DELAY, max_backoff=MAX_DELAY,
                      unique_for=MAX_DELAY)
    keyed = declare("largest_keyed", concurrency=INT_MAX, concurrency_key="label",
                    priority=INT_MIN)
    with running_worker(alias, threads=1):
        for n in range(3):
            ids = [largest.enqueue(f"run {n}").id, keyed.enqueue(f"key {n % 2}").id,
                   add.enqueue(n, n).id]
            wait_until(_succeeded(alias, ids), timeout=30, message=f"round {n} to succeed")
    assert events(caplog, "jobs.worker.claim-failed") == []


@pytest.mark.parametrize("cap", BAD_CAPS, ids=repr)
def test_a_cap_the_slot_table_cannot_hold_is_refused_at_declaration_and_jobs_keep_running(
        alias: str, cap: float) -> None:
    # rule 54 (bad-flow-option-refused)
    with pytest.raises(JobOptionError, match=r"^job 'unholdable': concurrency must be a whole "
                                             r"number from 1 to 2147483647 \(or None for no "
                                             r"cap\), not "):
        job(name="unholdable", concurrency=cap)(noop)
    assert registered("unholdable") is None
    ids = [add.enqueue(n, 1).id for n in range(3)]
    with running_worker(alias, threads=2):
        wait_until(_succeeded(alias, ids), timeout=30, message="the plain jobs to succeed")


def test_a_worker_whose_code_declares_an_unholdable_cap_stops_before_it_claims(
        alias: str, worker_processes: WorkerProcesses) -> None:
    # rule 54 (bad-flow-option-refused): the declaration raises when the worker process imports its
    # jobs, so it never registers nor claims; a worker without it runs the jobs meanwhile.
    ids = [add.enqueue(n, 2).id for n in range(3)]
    bad = worker_processes.start(alias, "--threads", "2", "--poll-interval", "0.05",
                                 env={"ULTJOBS_TEST_BAD_OPTIONS": json.dumps(
                                     {"concurrency": 2**31})})
    assert bad.wait(60) != 0
    last = worker_processes.logs().strip().splitlines()[-1]
    assert last.startswith("django_ultjobs.exceptions.JobOptionError: job 'bad_options': "
                           "concurrency must be a whole number from 1 to 2147483647"), last
    assert not Worker.objects.using(alias).exists()
    assert Job.objects.using(alias).filter(id__in=ids, status="queued").count() == len(ids)
    worker_processes.start(alias, "--threads", "2", "--poll-interval", "0.05")
    wait_until(_succeeded(alias, ids), timeout=60, message="the plain jobs to succeed")
