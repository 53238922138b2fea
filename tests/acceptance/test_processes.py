"""Acceptance: real ``runjobworker`` processes, killed for real, on real PostgreSQL.

Every worker here is a separate OS process (``python -m django runjobworker``) started against the
test database, so nothing is shared but the database: exactly the production shape (many workers,
one PostgreSQL). Processes are SIGKILLed (no ``finally`` runs, no settle, no release),
SIGSTOPped (a paused VM, a GC pause, a partition: the process is alive but silent) and
SIGTERMed (a deploy). Nothing waits for things to "settle" on a timer: every wait is on a
database condition, with a deadline.

The runs of the jobs used here (``clocked``, ``capped_clocked`` in tests/testapp/jobs.py) log their
start and end in the jobs database (RunLog) on the DATABASE's clock, so runs in different
processes, and the kill times the test reads from the same clock, can be compared.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from django_ultjobs.models import AttemptRecord, Job, Slot, Worker
from tests.conftest import REPO, WorkerProcesses, running_worker, wait_until, worker_env
from tests.testapp.jobs import capped_clocked, clocked, record, serial
from tests.testapp.models import RunLog

from .fleet import TIMEOUT, Fleet

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]

CAPPED_KEY = "job:capped_clocked"


# -- helpers ---------------------------------------------------------------------------------------


def _worker_connection_settings(alias: str, env: dict[str, str] | None) -> str:
    """``prepare_threshold`` and ``plan_cache_mode`` of a worker process's connection, read by
    a process started as the workers are (their settings, their environment)."""
    code = ("import django; django.setup(); from django.db import connections; "
            f"c = connections[{alias!r}]; c.ensure_connection(); "
            "mode = c.connection.execute('SHOW plan_cache_mode').fetchone()[0]; "
            "print(c.connection.prepare_threshold, mode)")
    out = subprocess.run([sys.executable, "-c", code], env={**worker_env(alias), **(env or {})},
                         cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip()


def db_now(alias: str) -> datetime:
    """The database's clock, now (the clock every lease and every RunLog stamp is on)."""
    with connections[alias].cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        return cur.fetchone()[0]


def job_row(alias: str, job_id: int) -> Job:
    return Job.objects.using(alias).get(id=job_id)


def attempts(alias: str, job_id: int) -> list[tuple[int, str, str]]:
    return list(AttemptRecord.objects.using(alias).filter(job_id=job_id)
                .order_by("attempt", "id").values_list("attempt", "outcome", "worker_id"))


def runs(alias: str, job_id: int) -> list[RunLog]:
    return list(RunLog.objects.using(alias).filter(job_id=job_id).order_by("attempt", "id"))


def max_overlap(intervals: Iterable[tuple[Any, Any]]) -> int:
    """The most intervals ``[start, end]`` open at one instant; one ending exactly when another
    starts does not overlap it (ends sort before starts)."""
    points = []
    for start, end in intervals:
        assert end >= start, (start, end)
        points += [(start, 1), (end, -1)]
    points.sort(key=lambda p: (p[0], p[1]))
    open_now = peak = 0
    for _, delta in points:
        open_now += delta
        peak = max(peak, open_now)
    return peak


# -- rule 1 (leased-claim): a dead worker's job comes back, once
# ----------------------------------------------


def test_sigkilled_worker_job_is_redelivered_and_succeeds_once(
        pg_alias: str, worker_processes: WorkerProcesses, tmp_path: Path) -> None:
    """Rule 1 (leased-claim): SIGKILL mid-run; the job is re-delivered after the visibility timeout
    to another worker, counts as attempt 2 and succeeds exactly once; the re-claimer records attempt
    1 as ``lease_lost`` under the dead worker's id."""
    fleet = Fleet(worker_processes, pg_alias)
    gate = tmp_path / "gate"
    a = fleet.start("A", "--threads", "1")
    fleet.wait_registered(a)
    job = clocked.enqueue(label="r1", path=str(gate))
    fleet.wait(lambda: RunLog.objects.using(pg_alias).filter(job_id=job.id, attempt=1).exists(),
               20, "attempt 1 to start on A")
    first_claim = job_row(pg_alias, job.id).claimed_at
    b = fleet.start("B", "--threads", "1")
    fleet.wait_registered(b)

    # The heartbeat keeps a live worker's claim invisible well past the timeout, though B polls.
    fleet.wait(lambda: db_now(pg_alias) > first_claim + timedelta(seconds=TIMEOUT + 0.5), 10,
               "the run to outlive one visibility timeout")
    row = job_row(pg_alias, job.id)
    assert (row.status, row.attempt, row.worker_id) == ("running", 1, a)

    worker_processes.kill(fleet.by_id[a])
    killed_at = db_now(pg_alias)
    lease_end = job_row(pg_alias, job.id).visible_at  # what A's last heartbeat left
    assert lease_end - killed_at > timedelta(seconds=TIMEOUT / 4), "A's lease was not kept fresh"

    fleet.wait(lambda: RunLog.objects.using(pg_alias).filter(job_id=job.id, attempt=2).exists(),
               15, "the job to be re-delivered to B")
    redelivered = job_row(pg_alias, job.id)
    assert (redelivered.worker_id, redelivered.attempt) == (b, 2)
    # Not a moment before the lease lapsed, and promptly after.
    assert lease_end <= redelivered.claimed_at < lease_end + timedelta(seconds=3)

    gate.touch()
    fleet.wait(lambda: job_row(pg_alias, job.id).status == "succeeded", 15, "the job to succeed")

    done = job_row(pg_alias, job.id)
    assert (done.status, done.attempt, done.worker_id, done.result) == ("succeeded", 2, b, 2)
    assert attempts(pg_alias, job.id) == [(1, "lease_lost", a), (2, "succeeded", b)]
    lost = AttemptRecord.objects.using(pg_alias).get(job_id=job.id, attempt=1)
    assert lost.started_at == first_claim
    assert f"re-delivered to {b}" in lost.error  # recorded by the re-claimer, not the dead
    assert fleet.events("jobs.worker.redelivered", job_id=job.id, previous_worker=a,
                        worker_id=b)
    logged = runs(pg_alias, job.id)
    assert [(r.attempt, r.pid, r.ended_at is not None) for r in logged] == [
        (1, fleet.pid(a), False),  # two starts ...
        (2, fleet.pid(b), True),   # ... one end
    ]


# -- rule 4 (fenced-settle): a stale worker's late settle changes nothing
# ------------------------------------------


def test_stopped_worker_late_settle_changes_nothing(
        pg_alias: str, worker_processes: WorkerProcesses, tmp_path: Path) -> None:
    """Rule 4 (fenced-settle) across processes: A is SIGSTOPped past its lease, B re-claims and
    completes the job, then A resumes and finishes (or is cancelled). A's settle is fenced on its
    old claim token: the job keeps B's result and attempt, and A logs
    ``jobs.worker.settle-stale``."""
    fleet = Fleet(worker_processes, pg_alias)
    gate = tmp_path / "gate"
    a = fleet.start("A", "--threads", "1")
    fleet.wait_registered(a)
    job = clocked.enqueue(label="r4", path=str(gate))
    fleet.wait(lambda: RunLog.objects.using(pg_alias).filter(job_id=job.id, attempt=1).exists(),
               20, "attempt 1 to start on A")
    b = fleet.start("B", "--threads", "1")
    fleet.wait_registered(b)

    proc_a = fleet.by_id[a]
    proc_a.send_signal(signal.SIGSTOP)
    try:
        fleet.wait(lambda: RunLog.objects.using(pg_alias).filter(job_id=job.id, attempt=2)
                   .exists(), 15, "the job to be re-delivered to B while A is stopped")
        gate.touch()  # both bodies may now finish: B's now, A's when it resumes
        fleet.wait(lambda: job_row(pg_alias, job.id).status == "succeeded", 15,
                   "B to complete the job")
        settled = Job.objects.using(pg_alias).filter(id=job.id).values().get()
        history = attempts(pg_alias, job.id)
        assert (settled["worker_id"], settled["attempt"], settled["result"]) == (b, 2, 2)
        assert history == [(1, "lease_lost", a), (2, "succeeded", b)]
    finally:
        proc_a.send_signal(signal.SIGCONT)

    # A wakes up: its body either sees the gate and returns 1, or its heartbeat hears "no" first
    # and the run is cancelled. Either way its settle reaches the database and is refused.
    fleet.wait(lambda: [e for name in ("jobs.worker.settle-stale", "jobs.worker.settled")
                        for e in fleet.events(name, worker_id=a, job_id=job.id)], 15,
               "A's late settle to reach the database")
    assert fleet.events("jobs.worker.settle-stale", worker_id=a, job_id=job.id)
    assert not fleet.events("jobs.worker.settled", worker_id=a, job_id=job.id), \
        "the stale worker's settle was applied"
    assert proc_a.poll() is None, "the stale worker must carry on, not crash"
    assert Job.objects.using(pg_alias).filter(id=job.id).values().get() == settled
    assert attempts(pg_alias, job.id) == history
    late = RunLog.objects.using(pg_alias).get(job_id=job.id, attempt=1)
    assert late.pid == proc_a.pid


# -- many workers, one queue: each job runs once -----------------------------------------------


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
def test_three_workers_race_over_a_thousand_jobs(
        pg_alias: str, worker_processes: WorkerProcesses, prepared: bool) -> None:
    """Rule 1 (leased-claim), a claimed job invisible to every other claim, across processes:
    three worker processes racing over 1,000 bulk-enqueued jobs (one claim statement each time,
    FOR UPDATE SKIP LOCKED) run each exactly once: one RunLog row, one attempt, attempt 1. Again
    with workers that prepare every statement at its first run (a site's
    OPTIONS["prepare_threshold"]) and run each on its generic plan, the plan a prepared
    statement may switch to after five runs."""
    fleet = Fleet(worker_processes, pg_alias)
    env = {"ULTJOBS_TEST_PREPARE_THRESHOLD": "0"} if prepared else None
    if prepared:
        assert _worker_connection_settings(pg_alias, env) == "0 force_generic_plan"
    workers = [fleet.start(name, "--threads", "4", env=env) for name in ("A", "B", "C")]
    fleet.wait_registered(*workers)
    ids = clocked.bulk_enqueue([clocked.call(label="race") for _ in range(1000)])
    assert len(set(ids)) == 1000
    jobs = Job.objects.using(pg_alias).filter(id__in=ids)
    fleet.wait(lambda: jobs.filter(status="succeeded").count() == 1000, 90,
               "1,000 jobs to succeed")

    assert set(jobs.values_list("status", "attempt")) == {("succeeded", 1)}
    logged = RunLog.objects.using(pg_alias).filter(job_id__in=ids)
    per_job = Counter(logged.values_list("job_id", flat=True))
    assert len(per_job) == 1000 and set(per_job.values()) == {1}, "a job ran twice (or never)"
    assert not logged.filter(ended_at__isnull=True).exists()
    recorded = AttemptRecord.objects.using(pg_alias).filter(job_id__in=ids)
    assert recorded.count() == 1000
    assert set(recorded.values_list("attempt", "outcome")) == {(1, "succeeded")}
    by_worker = Counter(recorded.values_list("worker_id", flat=True))
    assert set(by_worker) == set(workers), f"not a race: {by_worker}"
    assert not fleet.events("jobs.worker.settle-stale")
    assert not fleet.events("jobs.worker.redelivered")


# -- rules 5 (fleet-cap) to 8 (lost-slot-cancels): fleet slots under chaos
# ------------------------------------------------------------


CHAOS_SEED = 20261202
CHAOS_JOBS = 80
CHAOS_ROUNDS = 4


def test_fleet_slots_hold_fleet_wide_while_workers_are_killed(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:
    """Rules 5 (fleet-cap)-8 ("fleet slots chaos"): 4 worker processes x 4 threads run 80 runs of a
    concurrency=2 job while, round after round, a (seeded) random worker holding a slot is
    SIGKILLed and replaced. Every job succeeds exactly once, none is lost, and at no instant do
    more than 2 runs execute. "Exactly once" is one ``succeeded`` settle per job; a body killed
    after stamping its end but before its settle was written is re-run (at-least-once, the
    queue's contract), so such a run is accounted for rather than forbidden.

    Why the "at no instant" check is sound. Each run stamps its start after its slot was taken
    and its end before its slot is released or passed on to the worker's next run (both on the
    database's clock; the slot passes only once the settle is written), so its logged
    interval lies inside the time it held the slot; a run SIGKILLed mid-body never stamps an
    end, and its interval is closed at the kill time read from the database right after the
    process was reaped: the body had stopped by then, and its slot stays held (until its TTL
    lapses) past it. So if slots really cap the fleet at 2, the logged intervals never overlap
    more than 2 deep; and a cap held per process (16 threads, 4 processes: up to 8 runs) or not
    at all would show up as overlap above 2, since every run takes 150 ms and the threads are
    there to run them.
    """
    rng = random.Random(CHAOS_SEED)
    fleet = Fleet(worker_processes, pg_alias)
    live = [fleet.start(f"W{i}", "--threads", "4") for i in range(4)]
    fleet.wait_registered(*live)
    ids = capped_clocked.bulk_enqueue(
        [capped_clocked.call(label="chaos", seconds=0.15) for _ in range(CHAOS_JOBS)])
    jobs = Job.objects.using(pg_alias).filter(id__in=ids)
    leases = Slot.objects.using(pg_alias).filter(key=CAPPED_KEY)
    killed_at: dict[int, datetime] = {}
    killed_ids: set[str] = set()

    def holders_running_a_body() -> list[str]:
        """Live workers holding a slot whose run has started its body (so a kill hits it)."""
        held = {h.rsplit(":", 1)[0] for h in leases.filter(expires_at__gt=db_now(pg_alias))
                .values_list("holder", flat=True)}
        open_pids = set(RunLog.objects.using(pg_alias).filter(
            job_id__in=ids, ended_at__isnull=True).values_list("pid", flat=True))
        return sorted(w for w in held & set(live) if fleet.pid(w) in open_pids)

    for round_no in range(CHAOS_ROUNDS):
        done_before = jobs.filter(status="succeeded").count()
        # Pace the rounds by progress (the fleet keeps running jobs between kills) ...
        fleet.wait(lambda n=done_before: jobs.filter(status="succeeded").count() >= n + 4, 30,
                   f"progress before chaos round {round_no}")
        # ... and kill a worker that is in the middle of a capped run.
        victim = rng.choice(fleet.wait(holders_running_a_body, 15,
                                       "a worker running a capped job"))
        worker_processes.kill(fleet.by_id[victim])
        killed_at[fleet.pid(victim)] = db_now(pg_alias)
        killed_ids.add(victim)
        live.remove(victim)
        live.append(fleet.start(f"R{round_no}", "--threads", "4"))

    fleet.wait(lambda: jobs.filter(status="succeeded").count() == CHAOS_JOBS, 90,
               "every chaos job to succeed")

    # Every job succeeded exactly once, none lost.
    assert set(jobs.values_list("status", flat=True)) == {"succeeded"}
    history = AttemptRecord.objects.using(pg_alias).filter(job_id__in=ids)
    succeeded = Counter(history.filter(outcome="succeeded").values_list("job_id", flat=True))
    assert set(succeeded) == set(ids) and set(succeeded.values()) == {1}
    assert set(history.values_list("outcome", flat=True)) <= {"succeeded", "lease_lost"}
    assert set(history.filter(outcome="lease_lost").values_list("worker_id", flat=True)) \
        <= killed_ids, "a live worker lost a lease"
    assert history.filter(outcome="lease_lost").exists(), "the kills never hit a run"

    # Every run is accounted for: the succeeded attempt's body finished (stamped its end) on the
    # worker that settled it; any other run of the job was on a killed worker, at an attempt the
    # re-claimer recorded as lease_lost.
    pid_of = {w: p.pid for w, p in fleet.by_id.items()}
    won = {a.job_id: (a.attempt, pid_of[a.worker_id])
           for a in history.filter(outcome="succeeded")}
    lost = set(history.filter(outcome="lease_lost").values_list("job_id", "attempt"))
    logged = list(RunLog.objects.using(pg_alias).filter(job_id__in=ids))
    finished_bodies: dict[int, int] = defaultdict(int)
    late_finishes = 0
    for run in logged:
        assert run.label in ("chaos", "chaos:unwound"), run.label
        assert run.label == "chaos" or run.ended_at is None, "a run was cancelled"
        if (run.attempt, run.pid) == won[run.job_id]:
            assert run.ended_at is not None
            finished_bodies[run.job_id] += 1
            continue
        assert run.pid in killed_at, f"run {run.job_id}/{run.attempt} on a live worker"
        assert (run.job_id, run.attempt) in lost
        # Killed between its body's end and its settle: at-least-once, re-run and settled once.
        late_finishes += run.ended_at is not None
    assert finished_bodies == dict.fromkeys(ids, 1)

    # At no instant did more than 2 runs hold a slot (see the docstring).
    intervals = [(r.started_at, r.ended_at or killed_at[r.pid]) for r in logged]
    peak = max_overlap(intervals)
    assert peak <= 2, f"{peak} runs of a concurrency=2 job at once"
    assert peak == 2, "the cap was never even reached: the check proved nothing"
    # No slot outlived its TTL nor exceeded the cap at the end either.
    assert leases.filter(expires_at__gt=db_now(pg_alias)).count() <= 2
    print(f"chaos seed={CHAOS_SEED} killed={len(killed_at)} runs={len(logged)} "
          f"late_finishes={late_finishes}")


def test_a_fleet_cap_holds_across_workers_on_generic_plans(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:
    """Rule 5 (fleet-cap) with the capped kinds' own claim prepared: three
    worker processes that prepare every statement at its first run and run it on its generic plan
    (a site's OPTIONS["prepare_threshold"] after five runs) drain 40 runs of a concurrency=2
    job, four threads each: every job runs once, at its first attempt, and at no instant do more
    than 2 run. Each run logs its start after its slot was taken and its end before its slot
    passes on, so the logged intervals lie inside the slot holds (see the chaos test above).
    The worker that took the two slots first usually keeps them for the whole backlog
    (rule 90 (slot-passes-on-return)): the others' claims, on the same generic plan, see no free
    slot and take nothing."""
    fleet = Fleet(worker_processes, pg_alias)
    env = {"ULTJOBS_TEST_PREPARE_THRESHOLD": "0"}
    assert _worker_connection_settings(pg_alias, env) == "0 force_generic_plan"
    workers = [fleet.start(name, "--threads", "4", env=env) for name in ("A", "B", "C")]
    fleet.wait_registered(*workers)
    ids = capped_clocked.bulk_enqueue(
        [capped_clocked.call(label="generic", seconds=0.05) for _ in range(40)])
    jobs = Job.objects.using(pg_alias).filter(id__in=ids)
    fleet.wait(lambda: jobs.filter(status="succeeded").count() == 40, 90,
               "40 capped jobs to succeed")
    assert set(jobs.values_list("attempt", flat=True)) == {1}
    logged = list(RunLog.objects.using(pg_alias).filter(job_id__in=ids))
    assert sorted(r.job_id for r in logged) == sorted(ids), "a job ran twice (or never)"
    peak = max_overlap((r.started_at, r.ended_at) for r in logged)
    assert peak <= 2, f"{peak} runs of a concurrency=2 job at once"
    assert peak == 2, "the cap was never even reached: the check proved nothing"


# -- rules 7 (fenced-slot-renewal)/8: a lapsed slot cancels its stalled holder and never revives
# -------------------------


def test_slot_lapsed_while_holder_stopped_is_lost_not_revived(
        pg_alias: str, worker_processes: WorkerProcesses, tmp_path: Path) -> None:
    """Rules 7 (fenced-slot-renewal) and 8 (lost-slot-cancels) across processes: A holds both slots
    of a concurrency=2 job and is SIGSTOPped past the TTL; B (one thread) takes a lapsed slot for a
    third run. On SIGCONT A's renewals answer "no" for both (one slot taken by another holder, one
    merely lapsed), both its runs are cancelled with ``jobs.worker.slot-lost`` and recorded
    ``slot_lost``, and neither lapsed slot comes back to life nor is B's slot extended or taken by
    A."""
    fleet = Fleet(worker_processes, pg_alias)
    gate = tmp_path / "gate"
    a = fleet.start("A", "--threads", "2")
    fleet.wait_registered(a)
    j1 = capped_clocked.enqueue(label="held", path=str(gate))
    j2 = capped_clocked.enqueue(label="held", path=str(gate))
    leases = Slot.objects.using(pg_alias).filter(key=CAPPED_KEY)
    fleet.wait(lambda: RunLog.objects.using(pg_alias).filter(job_id__in=[j1.id, j2.id])
               .count() == 2, 20, "A to run both capped jobs")
    held_by_a = dict(leases.values_list("holder", "slot"))
    assert held_by_a.keys() == {f"{a}:{j1.id}", f"{a}:{j2.id}"}
    slot_of = {j1.id: held_by_a[f"{a}:{j1.id}"], j2.id: held_by_a[f"{a}:{j2.id}"]}

    # A third run, ahead of everything (B's single thread must take it, not re-claim j1/j2).
    j3 = capped_clocked.using(priority=10).enqueue(label="taker", path=str(gate))
    b = fleet.start("B", "--threads", "1")
    fleet.wait_registered(b)

    proc_a = fleet.by_id[a]
    proc_a.send_signal(signal.SIGSTOP)
    stopped_at = db_now(pg_alias)
    try:
        fleet.wait(lambda: RunLog.objects.using(pg_alias).filter(job_id=j3.id).exists(), 15,
                   "B to take a lapsed slot and run the third job")
        taken = leases.get(holder=f"{b}:{j3.id}")
        assert taken.slot in slot_of.values()
        assert taken.acquired_at > stopped_at
        # The slot B did not take is lapsed, still in A's name; A's jobs were not re-delivered.
        (untaken,) = leases.exclude(slot=taken.slot)
        assert untaken.holder.startswith(f"{a}:") and untaken.expires_at < db_now(pg_alias)
        for j in (j1, j2):
            row = job_row(pg_alias, j.id)
            assert (row.status, row.worker_id, row.attempt) == ("running", a, 1)
    finally:
        proc_a.send_signal(signal.SIGCONT)
    resumed_at = db_now(pg_alias)

    fleet.wait(lambda: AttemptRecord.objects.using(pg_alias).filter(
        job_id__in=[j1.id, j2.id], outcome="slot_lost").count() == 2, 15,
        "A's renewals to answer no and its runs to be cancelled")

    # Rule 8 (lost-slot-cancels): cancelled, logged with worker, job, key and slot, recorded for the
    # admin.
    for j in (j1, j2):
        lost = AttemptRecord.objects.using(pg_alias).get(job_id=j.id, outcome="slot_lost")
        assert (lost.attempt, lost.worker_id, lost.slot_key, lost.slot) == \
            (1, a, CAPPED_KEY, slot_of[j.id])
        assert len(fleet.events("jobs.worker.slot-lost", worker_id=a, job_id=j.id,
                                lease_key=CAPPED_KEY, slot=slot_of[j.id])) == 1
        # The first run unwound. (A may already have run the job again: a lost slot hands it
        # back without burning the attempt, so a later run of it is attempt 1 too.)
        first = RunLog.objects.using(pg_alias).filter(
            job_id=j.id, pid=proc_a.pid, attempt=1).order_by("id").first()
        assert first is not None and first.label == "held:unwound", "the run was not cancelled"
    assert not fleet.events("jobs.worker.lease-lost", worker_id=a), \
        "the job leases were still A's: only the slots were lost"

    # Rule 7 (fenced-slot-renewal): a lapsed slot never revives. A revival would keep the old
    # acquired_at and push expires_at past the resume; a fresh acquire (A may take the free slot for
    # its next run) writes a new acquired_at.
    assert not leases.filter(acquired_at__lt=stopped_at, expires_at__gt=resumed_at).exists()
    still = leases.get(slot=taken.slot)
    assert (still.holder, still.acquired_at) == (taken.holder, taken.acquired_at)
    live = list(leases.filter(expires_at__gt=db_now(pg_alias)).values_list("slot", flat=True))
    assert len(live) <= 2 and len(set(live)) == len(live)

    gate.touch()
    every = [j1.id, j2.id, j3.id]
    fleet.wait(lambda: Job.objects.using(pg_alias).filter(id__in=every, status="succeeded")
               .count() == 3, 20, "all three jobs to succeed")
    assert attempts(pg_alias, j3.id) == [(1, "succeeded", b)]
    for j in (j1, j2):
        history = attempts(pg_alias, j.id)
        # The lost slot did not burn the attempt: the rerun is attempt 1 again.
        assert [(n, o) for n, o, _ in history] == [(1, "slot_lost"), (1, "succeeded")]
        assert job_row(pg_alias, j.id).attempt == 1


# -- no head-of-line blocking ----------------------------------------------------------------------


def test_a_thousand_serial_jobs_do_not_block_the_queue(pg_alias: str) -> None:
    """Rule 5 (fleet-cap) and "no head-of-line blocking" (docs/concurrency.md): 1,000 runnable runs
    of a concurrency=1 job queued AHEAD of 100 ordinary jobs (lower ids, same priority) neither
    stall them nor make the claim loop spin; one serial run at a time. (In-process worker, to
    count its claim statements.)"""
    serial_ids = serial.bulk_enqueue([(0.05,)] * 1000)
    plain_ids = record.bulk_enqueue([("plain",)] * 100)
    assert max(serial_ids) < min(plain_ids)
    jobs = Job.objects.using(pg_alias)
    started = time.monotonic()
    with running_worker(pg_alias, threads=4, visibility_timeout=TIMEOUT,
                        heartbeat_interval=0.5, poll_interval=0.05) as worker:
        wait_until(lambda: jobs.filter(id__in=plain_ids, status="succeeded").count() == 100,
                   timeout=20, message="the 100 ordinary jobs")
        elapsed = time.monotonic() - started
        claims = worker.claim_statements
        serial_done = jobs.filter(id__in=serial_ids, status="succeeded").count()
    assert serial_done < 50, f"ordinary jobs waited behind {serial_done} serial runs"
    # Without spinning, each run's end wakes at most two claims (its freed thread, its written
    # settle; the claim loop no longer waits for the kept slot), bar the idle polls.
    assert claims <= 2 * (100 + serial_done) + 1 + 2 * elapsed / 0.05, \
        f"{claims} claims for {100 + serial_done} runs in {elapsed:.1f}s"
    assert claims <= 3 * (100 + serial_done) + 20, f"the claim loop spun: {claims} claims"
    print(f"hol: claims={claims} serial_done={serial_done} elapsed={elapsed:.2f}s")
    serial_runs = RunLog.objects.filter(job_id__in=serial_ids)
    assert not serial_runs.filter(ended_at__isnull=True).exists()
    assert serial_runs.count() >= serial_done
    assert max_overlap(serial_runs.values_list("started_at", "ended_at")) == 1
    # The hand-backs of serial runs that found the slot full burned nothing.
    assert not jobs.filter(id__in=serial_ids, status="queued", attempt__gt=0).exists()


# -- graceful drain: SIGTERM hands the job back ----------------------------------------------------


def test_sigterm_drains_and_hands_the_job_back(
        pg_alias: str, worker_processes: WorkerProcesses, tmp_path: Path) -> None:
    """Graceful drain ("worker shutdown" in docs/guarantees.md) across a process: SIGTERM with
    ``--grace-period 0.5`` while a long cooperative job runs; the process exits 0 within
    seconds, the job is queued again with its attempt not burned (outcome ``interrupted``), and
    another worker completes it."""
    fleet = Fleet(worker_processes, pg_alias)
    gate = tmp_path / "gate"
    a = fleet.start("A", "--threads", "2", "--grace-period", "0.5")
    fleet.wait_registered(a)
    job = clocked.enqueue(label="drain", path=str(gate))
    fleet.wait(lambda: RunLog.objects.using(pg_alias).filter(job_id=job.id).exists(), 20,
               "the job to start on A")

    proc_a = fleet.by_id[a]
    term_sent = time.monotonic()
    proc_a.send_signal(signal.SIGTERM)
    assert proc_a.wait(10) == 0
    assert time.monotonic() - term_sent < 5.0

    row = job_row(pg_alias, job.id)
    assert (row.status, row.attempt, row.claim_token) == ("queued", 0, None)
    assert row.visible_at <= db_now(pg_alias)  # handed back for at once, not after a lease lapse
    assert attempts(pg_alias, job.id) == [(1, "interrupted", a)]
    body = RunLog.objects.using(pg_alias).get(job_id=job.id)
    assert body.label == "drain:unwound"
    assert fleet.events("jobs.worker.stopped", worker_id=a)
    assert Worker.objects.using(pg_alias).get(id=a).stopped_at is not None

    b = fleet.start("B", "--threads", "1")
    gate.touch()
    fleet.wait(lambda: job_row(pg_alias, job.id).status == "succeeded", 20,
               "another worker to complete the job")
    done = job_row(pg_alias, job.id)
    assert (done.attempt, done.worker_id, done.result) == (1, b, 1)
    assert attempts(pg_alias, job.id) == [(1, "interrupted", a), (1, "succeeded", b)]
