"""Every option value ``@job`` accepts runs, on both engines (rule 54).

The largest cap PostgreSQL's ``integer`` holds, 2**31 - 1, was accepted, and its slot statement
then counted every slot up to it, for minutes, holding SQLite's writer lock; on PostgreSQL a
slot kept from the run before, added to that cap, overflowed the claim's ``integer``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_ultjobs import job
from django_ultjobs.job_options import INT_MAX, INT_MIN
from django_ultjobs.job_spec import JobSpec
from django_ultjobs.models import Job
from django_ultjobs.registry import unregister
from django_ultjobs.retry import MAX_DELAY
from tests.conftest import events, running_worker, wait_until
from tests.testapp.jobs import add

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


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
    # rule 54: 2**31 - 1 fleet slots, per job and per key, claim again and again (each claim
    # offered the slot kept from the run before) beside the largest rate limit, and the
    # other options at their bounds, on both engines, and no claim fails.
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
