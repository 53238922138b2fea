"""A real worker (on a thread of this process) on both engines: per-key caps hold per key and
let keys run side by side (rules 50 (per-key-cap), 51 (per-key-slot)), and a rate limit spaces
starts without burning an attempt (rules 52 (fleet-rate-limit), 53 (rate-wait-unburned)). The
multi-process proofs are in
tests/acceptance."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

import pytest

from django_ultjobs.core.rate_limits import parse_rate_limit
from django_ultjobs.models import AttemptRecord, Job, RateLimitBucket, Slot
from tests.conftest import running_worker, wait_until
from tests.testapp.jobs import keyed_clocked, rated_clocked
from tests.testapp.models import RunLog

from ..acceptance.test_processes import max_overlap

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_a_cap_per_key_holds_per_key_and_keys_run_side_by_side(alias: str) -> None:
    ids = keyed_clocked.bulk_enqueue(
        [keyed_clocked.call(c, seconds=0.1) for c in ["a", "b", "c"] * 4])
    jobs = Job.objects.using(alias).filter(id__in=ids)
    with running_worker(alias, threads=6):
        wait_until(lambda: jobs.filter(status="succeeded").count() == len(ids), timeout=60,
                   message="every keyed job to succeed")
    spans: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for run in RunLog.objects.using(alias).filter(job_id__in=ids):
        spans[run.label].append((run.started_at, run.ended_at))
    assert {label: max_overlap(s) for label, s in spans.items()} == {
        "keyed:a": 1, "keyed:b": 1, "keyed:c": 1}
    assert max_overlap([s for group in spans.values() for s in group]) >= 2
    # Per-key slots went back with their settles (rule 51 (per-key-slot)): none is kept between
    # runs.
    wait_until(lambda: not Slot.objects.using(alias).exists(), timeout=5,
               message="per-key slots to be released")


def test_a_rate_limit_spaces_starts_without_burning_attempts(alias: str) -> None:
    # rule 52 (fleet-rate-limit)
    # rule 53 (rate-wait-unburned): a run over the limit waits without burning an attempt
    rate = parse_rate_limit("rated_clocked", "50/s")
    assert rate is not None
    ids = rated_clocked.bulk_enqueue([rated_clocked.call() for _ in range(30)])
    jobs = Job.objects.using(alias).filter(id__in=ids)
    with running_worker(alias, threads=8):
        wait_until(lambda: jobs.filter(status="succeeded").count() == len(ids), timeout=60,
                   message="every rated job to succeed")
    starts = sorted(RunLog.objects.using(alias).filter(job_id__in=ids)
                    .values_list("started_at", flat=True))
    # A burst, then one start per 20 ms at most: 30 starts cannot take less than this.
    least = (len(ids) - rate.burst) * rate.interval / 1e6
    assert (starts[-1] - starts[0]).total_seconds() >= least * 0.95
    assert set(jobs.values_list("attempt", flat=True)) == {1}
    assert list(AttemptRecord.objects.using(alias).filter(job_id__in=ids)
                .values_list("outcome", flat=True).distinct()) == ["succeeded"]
    assert RateLimitBucket.objects.using(alias).get().key == "job:rated_clocked"
