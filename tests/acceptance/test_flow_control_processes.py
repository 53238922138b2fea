"""Acceptance: per-key caps and rate limits held by real ``runjobworker`` processes on real
PostgreSQL, workers SIGKILLed for real (rules 50 (per-key-cap) to 53 (rate-wait-unburned)).

The jobs (``keyed_clocked``, ``rated_clocked`` in tests/testapp/jobs.py) log each run's start
and end in the jobs database on the DATABASE's clock, so runs in different processes compare.
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime
from itertools import pairwise

import pytest

from django_ultjobs.core.rate_limits import parse_rate_limit
from django_ultjobs.core.slot_keys import keyed_slot_key
from django_ultjobs.models import AttemptRecord, Job, Slot
from tests.conftest import WorkerProcesses
from tests.testapp.jobs import keyed_clocked, rated_clocked
from tests.testapp.models import RunLog

from .test_processes import Fleet, db_now, max_overlap

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]

CUSTOMERS = ["acme", "bolt", "cirrus", "dyno"]


# rules 50 (per-key-cap) and 51 (per-key-slot)
def test_per_key_caps_hold_fleet_wide_while_workers_are_killed(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:
    """4 worker processes x 4 threads run 80 runs of a concurrency=1-per-customer job (4
    customers) while, round after round, a random worker in the middle of a run is SIGKILLed
    and replaced. Every job succeeds, and at no instant do two runs of one customer overlap;
    runs of different customers do (the cap is per key, not per job).

    A run stamps its start after its slot was taken and its end before the slot is released
    (per-key slots go back only once the settle is written); a run killed mid-body has its
    interval closed at the kill time, read from the database right after the process was
    reaped, while its slot stays held until its TTL. So a per-key cap that held shows no
    overlap above one per customer."""
    rng = random.Random(50)
    fleet = Fleet(worker_processes, pg_alias)
    live = [fleet.start(f"K{i}", "--threads", "4") for i in range(4)]
    fleet.wait_registered(*live)
    ids = keyed_clocked.bulk_enqueue([
        keyed_clocked.call(CUSTOMERS[i % 4], label="churn", seconds=0.15) for i in range(80)])
    jobs = Job.objects.using(pg_alias).filter(id__in=ids)
    killed_at: dict[int, datetime] = {}
    for round_no in range(4):
        done = jobs.filter(status="succeeded").count()
        fleet.wait(lambda n=done: jobs.filter(status="succeeded").count() >= n + 4, 60,
                   f"progress before round {round_no}")
        busy = set(RunLog.objects.using(pg_alias).filter(
            job_id__in=ids, ended_at__isnull=True).values_list("pid", flat=True))
        victims = [w for w in live if fleet.pid(w) in busy]
        if not victims:
            continue
        victim = rng.choice(victims)
        worker_processes.kill(fleet.by_id[victim])
        killed_at[fleet.pid(victim)] = db_now(pg_alias)
        live.remove(victim)
        live.append(fleet.start(f"R{round_no}", "--threads", "4"))
    fleet.wait(lambda: jobs.filter(status="succeeded").count() == len(ids), 120,
               "every keyed job to succeed")
    assert killed_at, "no kill hit a run"

    by_customer: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    every: list[tuple[datetime, datetime]] = []
    for run in RunLog.objects.using(pg_alias).filter(job_id__in=ids):
        customer = run.label.split(":")[1]
        interval = (run.started_at, run.ended_at or killed_at[run.pid])
        by_customer[customer].append(interval)
        every.append(interval)
    peaks = {c: max_overlap(spans) for c, spans in by_customer.items()}
    assert peaks == dict.fromkeys(CUSTOMERS, 1), peaks
    assert max_overlap(every) >= 3, "keys never ran side by side: the cap acted per job"
    # Nothing burned an attempt for a slot, and no key's slot outlived its TTL above the cap.
    assert not AttemptRecord.objects.using(pg_alias).filter(
        job_id__in=ids, outcome="slot_lost").exists()
    for customer in CUSTOMERS:
        assert Slot.objects.using(pg_alias).filter(
            key=keyed_slot_key("keyed_clocked", customer),
            expires_at__gt=db_now(pg_alias)).count() <= 1


def test_a_full_key_holds_back_no_other_key(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:  # rule 50 (per-key-cap)
    """10,000 queued runs of one customer ahead of a few runs of others: the others run at once
    (within seconds), while the first customer's backlog still waits its turn."""
    fleet = Fleet(worker_processes, pg_alias)
    ahead = keyed_clocked.bulk_enqueue(
        [keyed_clocked.call("acme", label="ahead", seconds=0.5) for _ in range(10_000)])
    behind = keyed_clocked.bulk_enqueue(
        [keyed_clocked.call(c, label="behind", seconds=0.0) for c in CUSTOMERS[1:] * 2])
    worker = fleet.start("H", "--threads", "4")
    fleet.wait_registered(worker)
    fleet.wait(lambda: Job.objects.using(pg_alias).filter(
        id__in=behind, status="succeeded").count() == len(behind), 15,
        "the other customers' runs to finish behind a full key")
    started_ahead = RunLog.objects.using(pg_alias).filter(job_id__in=ahead).count()
    assert 1 <= started_ahead <= 40, started_ahead


# rules 52 (fleet-rate-limit) and 53 (rate-wait-unburned)
def test_a_rate_limit_holds_across_processes(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:
    """50/s across 4 worker processes x 8 threads, 600 runs queued at once: no one-second window
    of starts holds more than the limit and its edge allowance (plus one for the dispatch
    jitter: the bodies stamp their starts a few ms after the grant), the long-run rate is within
    5 % of the limit, and no run over the limit burned an attempt."""
    rate = parse_rate_limit("rated_clocked", "50/s")
    assert rate is not None
    fleet = Fleet(worker_processes, pg_alias)
    live = [fleet.start(f"T{i}", "--threads", "8") for i in range(4)]
    fleet.wait_registered(*live)
    ids = rated_clocked.bulk_enqueue([rated_clocked.call() for _ in range(600)])
    jobs = Job.objects.using(pg_alias).filter(id__in=ids)
    fleet.wait(lambda: jobs.filter(status="succeeded").count() == len(ids), 90,
               "every rated job to succeed")
    # What the limiter guarantees: its grants, on the database's clock (each take logs its own).
    grants = sorted(int(e["at_us"]) / 1e6 for e in fleet.events("jobs.worker.rate-granted")
                    for _ in range(int(e["granted"])))
    assert len(grants) == len(ids)
    worst = _worst_window(grants, rate.period)
    # Past the first burst, the steady rate: starts per second from the burst's end to the last.
    span = grants[-1] - grants[rate.burst - 1]
    steady = (len(grants) - rate.burst) / span
    # Time no worker asked for a start (a host starved of CPU: the workers' claims stalled) is
    # lost past the tolerance, by design (rule 52 (fleet-rate-limit)); the limiter's own rate leaves
    # it out.
    tolerance = rate.tolerance / 1e6
    stalled = sum(max(0.0, b - a - tolerance) for a, b in pairwise(grants))
    own = (len(grants) - rate.burst) / (span - stalled)
    # The bodies stamp their starts a few ms after their grants: what an outside observer sees.
    starts = sorted(s.timestamp() for s in RunLog.objects.using(pg_alias)
                    .filter(job_id__in=ids).values_list("started_at", flat=True))
    print(f"rate 50/s, 4 processes x 8 threads: worst 1-s window of grants {worst}, of body "
          f"starts {_worst_window(starts, rate.period)}; steady {steady:.2f} starts/s, "
          f"{own:.2f} leaving out {stalled:.2f} s of stalled claims in {span:.2f} s")
    assert worst <= rate.count + rate.window_allowance
    assert own == pytest.approx(rate.count, rel=0.05)
    assert set(jobs.values_list("attempt", flat=True)) == {1}
    assert set(AttemptRecord.objects.using(pg_alias).filter(job_id__in=ids)
               .values_list("outcome", flat=True)) == {"succeeded"}


def _worst_window(times: list[float], period: float) -> int:
    """The most of ``times`` (sorted) inside any half-open window of ``period`` seconds."""
    worst, low = 0, 0
    for high, t in enumerate(times):
        while times[low] <= t - period:
            low += 1
        worst = max(worst, high - low + 1)
    return worst
