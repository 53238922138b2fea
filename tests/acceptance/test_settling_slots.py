"""Acceptance: a fleet slot passes on once its body has returned (rules 90 (slot-passes-on-return)
to 92 (passed-on-window)), real worker processes on real PostgreSQL.

The workers here write every settle batch only after ``ULTJOBS_TEST_SETTLE_DELAY`` seconds
(``tests.doubles.SlowSettlePostgresStore``), so their runs spend a long while settling: body
returned, outcome queued, settle not committed. The cap bounds bodies executing, so the next
runs start meanwhile; it never lets more than N bodies execute at once, fleet-wide; and a worker
SIGKILLed with runs settling frees its slots on their TTL, its jobs re-delivered on their leases'.

Bodies (``capped_clocked``, concurrency=2) stamp their start and end on the database's clock;
a settle's time is its attempt row's ``finished_at``, on the same clock, taken by the settle's
transaction after the delay.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from django_ultjobs.models import AttemptRecord, Job, Slot
from tests.acceptance.fleet import Fleet
from tests.acceptance.test_processes import CAPPED_KEY, db_now, max_overlap
from tests.conftest import WorkerProcesses
from tests.testapp.jobs import capped_clocked
from tests.testapp.models import RunLog

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]


def slow_settles(seconds: float) -> dict[str, str]:
    """A worker process's environment: every settle batch waits ``seconds`` first."""
    return {"ULTJOBS_TEST_EXTRA": json.dumps({"STORE": "tests.doubles.SlowSettlePostgresStore"}),
            "ULTJOBS_TEST_SETTLE_DELAY": str(seconds)}


def test_next_runs_start_while_settles_are_pending_and_bodies_never_exceed_the_cap(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:
    # rule 92 (passed-on-window): more runs in flight than the cap while some settle, never more
    # bodies
    """Rules 90 (slot-passes-on-return) and 5 (fleet-cap): two workers x 4 threads, a concurrency=2
    job, every settle held back a second. Runs start while earlier runs of the job are still
    settling (in flight beyond the cap), yet at no instant do more than 2 bodies execute. With the
    slot held until the settle (the old rule), runs in flight, settling included, never exceeded
    2."""
    fleet = Fleet(worker_processes, pg_alias)
    workers = [fleet.start(f"S{i}", "--threads", "4", env=slow_settles(1.0)) for i in range(2)]
    fleet.wait_registered(*workers)
    ids = capped_clocked.bulk_enqueue(
        [capped_clocked.call(label="settling", seconds=0.1) for _ in range(16)])
    jobs = Job.objects.using(pg_alias).filter(id__in=ids)
    fleet.wait(lambda: jobs.filter(status="succeeded").count() == len(ids), 90,
               "every job to succeed")

    history = AttemptRecord.objects.using(pg_alias).filter(job_id__in=ids)
    assert Counter(history.values_list("outcome", flat=True)) == {"succeeded": len(ids)}
    logged = {r.job_id: r for r in RunLog.objects.using(pg_alias).filter(job_id__in=ids)}
    assert len(logged) == len(ids) and all(r.label == "settling" for r in logged.values())
    bodies = [(r.started_at, r.ended_at) for r in logged.values()]
    assert max_overlap(bodies) == 2, "more (or fewer) bodies than the cap executed at once"
    # In flight from the body's start to the settle's commit: beyond the cap, because a slot
    # passed on while its run was settling.
    settled = dict(history.values_list("job_id", "finished_at"))
    in_flight = [(logged[job_id].started_at, settled[job_id]) for job_id in ids]
    assert max_overlap(in_flight) > 2, "no run started while another's settle was pending"


def test_a_worker_killed_with_runs_settling_frees_its_slots_on_their_ttl(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:
    """Rules 90 (slot-passes-on-return), 6 (slot-renewed) and 1 (leased-claim): A (settles never
    written) runs four short bodies and then two long ones, its slots passing from run to run while
    every settle waits; SIGKILLed in the long ones, it releases nothing. B takes no slot before A's
    lapse on their TTL, re-runs A's jobs once their leases lapse, and every job succeeds once,
    bodies never more than 2 at once."""
    fleet = Fleet(worker_processes, pg_alias)
    stuck = fleet.start("A", "--threads", "2", env=slow_settles(600.0))
    fleet.wait_registered(stuck)
    ids = capped_clocked.bulk_enqueue(
        [capped_clocked.call(label="short", seconds=0.05) for _ in range(4)]
        + [capped_clocked.call(label="long", seconds=3.0) for _ in range(2)])
    logs = RunLog.objects.using(pg_alias).filter(job_id__in=ids)
    # With the slot held until the settle, A could never start a third body.
    fleet.wait(lambda: logs.filter(label="short", ended_at__isnull=False).count() == 4
               and logs.filter(label__startswith="long").count() == 2, 30,
               "A to run the short bodies, none of their settles written, then the long ones")
    assert Job.objects.using(pg_alias).filter(id__in=ids, status="running").count() == len(ids)
    worker_processes.kill(fleet.by_id[stuck])
    killed_at = db_now(pg_alias)
    slots = Slot.objects.using(pg_alias).filter(key=CAPPED_KEY)
    held = list(slots.filter(holder__startswith=f"{stuck}:", expires_at__gt=killed_at)
                .values_list("expires_at", flat=True))
    assert len(held) == 2, held

    fleet.start("B", "--threads", "4")
    jobs = Job.objects.using(pg_alias).filter(id__in=ids)
    fleet.wait(lambda: jobs.filter(status="succeeded").count() == len(ids), 60,
               "B to finish A's jobs")
    redone = logs.filter(started_at__gt=killed_at)
    assert redone.count() == len(ids)
    # B's first body waited for a slot A held: freed on its TTL, never released by A.
    first = min(redone.values_list("started_at", flat=True))
    assert first >= min(held), (first, held)
    history = AttemptRecord.objects.using(pg_alias).filter(job_id__in=ids)
    assert Counter(history.filter(outcome="succeeded").values_list("job_id", flat=True)) \
        == dict.fromkeys(ids, 1)
    bodies = [(r.started_at, r.ended_at or killed_at) for r in logs]
    assert max_overlap(bodies) <= 2
