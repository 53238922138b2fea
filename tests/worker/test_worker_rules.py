"""The worker's rules, proved in-process against a real WorkerProcess on SQLite and PostgreSQL.

Failures are injected by wrapping the real store (a subclass of the engine's store overriding one
method) or by writing the job tables through the ORM, as another worker or the admin would. Every
wait is a condition with a deadline (``wait_until``), never a sleep.
"""

from __future__ import annotations

import gc
import itertools
import logging
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connections
from django.test.utils import override_settings
from django.utils import timezone

from django_ultjobs.exceptions import (
    CancelRequestedError,
    JobSlotLostError,
    LeaseLostError,
    WorkerShutdownError,
)
from django_ultjobs.jobs import registry as job_registry
from django_ultjobs.management.commands.runjobworker import Command
from django_ultjobs.models import AttemptRecord, Job, Slot, Worker
from django_ultjobs.store import NewJob, Settlement, SlotHold, get_store
from django_ultjobs.worker import claim_loop, dispatch
from django_ultjobs.worker.fleet_slots import FleetSlots
from django_ultjobs.worker.loop_state import LoopState
from django_ultjobs.worker.options import WorkerOptions
from django_ultjobs.worker.runs import Run
from django_ultjobs.worker.worker import WorkerProcess
from tests.conftest import engine_store, events, running_worker, wait_until
from tests.doubles import (
    WORKER,
    MonotonicClock,
    StubSlots,
    claimed,
    no_slot_store_path,
    settle_outage_store,
)
from tests.stepsapp.jobs import cancel_myself_then_fail, raises_unprintable
from tests.testapp import jobs as testjobs
from tests.testapp.jobs import (
    add,
    block_until,
    capped,
    capped_clocked,
    capped_ignoring,
    flaky,
    ignore_cancel,
    record,
    serial,
    worker_always_fails,
    worker_fails_with_backoff,
    worker_serial_block_until,
    worker_weakref_probe,
)
from tests.testapp.models import RunLog

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

#: Short leases so lapses and beats happen within a test, and several beats fit in a lease.
FAST = {"visibility_timeout": 3.0, "heartbeat_interval": 0.2}


# -- helpers ----------------------------------------------------------------------------------


def row(alias: str, job_id: int) -> Job:
    return Job.objects.using(alias).get(id=job_id)


def attempts(alias: str, job_id: int) -> list[tuple[int, str]]:
    return list(AttemptRecord.objects.using(alias).filter(job_id=job_id)
                .order_by("id").values_list("attempt", "outcome"))


def status_is(alias: str, job_id: int, *statuses: str) -> Callable[[], bool]:
    return lambda: row(alias, job_id).status in statuses


def running_run(worker: WorkerProcess, job_id: int) -> Run:
    """Wait until ``job_id`` is running under the heartbeat in ``worker``; return its Run."""
    return wait_until(lambda: next((r for r in worker.runs.snapshot() if r.id == job_id),
                                   None), message=f"job {job_id} running")


def started(job_id: int) -> Callable[[], bool]:
    return lambda: RunLog.objects.filter(job_id=job_id).exists()


def finished(alias: str, *job_ids: int) -> bool:
    return Job.objects.using(alias).filter(
        pk__in=job_ids, status__in=["succeeded", "failed", "cancelled"]).count() == len(job_ids)


@pytest.fixture
def info_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="django_ultjobs")
    return caplog


@pytest.fixture
def go(tmp_path: Path) -> Path:
    """A file whose creation lets ``block_until`` style jobs finish."""
    return tmp_path / "go"


# -- rule 2 (heartbeat-retried): a failed heartbeat or renewal is not a loss
# ----------------------------------------


def test_heartbeat_that_raises_is_not_a_lost_lease(alias: str, go: Path,
                                                   info_logs: pytest.LogCaptureFixture) -> None:
    # rule 2 (heartbeat-retried)
    failures = 5

    class BlippingHeartbeat(engine_store(alias)):  # type: ignore[misc,valid-type]
        failed = 0

        def heartbeat(self, runs: Sequence[tuple[int, str]], visibility_timeout: float,
                      ) -> dict[int, bool]:
            if self.failed < failures:
                self.failed += 1
                raise OperationalError("server closed the connection unexpectedly")
            return super().heartbeat(runs, visibility_timeout)

    store = BlippingHeartbeat(alias)
    job = block_until.enqueue(str(go))
    with running_worker(alias, store=store, **FAST) as worker:
        run = running_run(worker, job.id)
        wait_until(lambda: store.failed == failures, message="heartbeats failing")
        go.touch()
        wait_until(status_is(alias, job.id, "succeeded", "failed", "queued", "cancelled"))
    assert not run.scope.cancelled
    assert (row(alias, job.id).status, row(alias, job.id).attempt) == ("succeeded", 1)
    assert attempts(alias, job.id) == [(1, "succeeded")]
    assert RunLog.objects.filter(job_id=job.id).count() == 1
    assert len(events(info_logs, "jobs.worker.heartbeat-failed")) >= failures
    assert events(info_logs, "jobs.worker.lease-lost") == []


def test_slot_renewal_that_raises_is_not_a_lost_slot(alias: str, go: Path,
                                                     info_logs: pytest.LogCaptureFixture) -> None:
    # rule 2 (heartbeat-retried), the same reasoning for the slot; rule 7 (fenced-slot-renewal)
    failures = 5

    class BlippingRenewal(engine_store(alias)):  # type: ignore[misc,valid-type]
        failed = 0

        def renew_many(self, held: Sequence[SlotHold], ttl: float) -> set[tuple[str, int, str]]:
            if self.failed < failures:
                self.failed += 1
                raise OperationalError("could not serialize access")
            return super().renew_many(held, ttl)

    store = BlippingRenewal(alias)
    job = worker_serial_block_until.enqueue(str(go))
    with running_worker(alias, store=store, **FAST) as worker:
        run = running_run(worker, job.id)
        wait_until(lambda: store.failed == failures, message="renewals failing")
        assert Slot.objects.using(alias).filter(
            holder=f"{worker.worker_id}:{job.id}").exists()
        go.touch()
        wait_until(status_is(alias, job.id, "succeeded", "failed", "queued", "cancelled"))
        wait_until(lambda: not Slot.objects.using(alias).exists(), message="slot released")
    assert not run.scope.cancelled and not run.slot_lost
    assert attempts(alias, job.id) == [(1, "succeeded")]
    assert len(events(info_logs, "jobs.worker.slot-renew-failed")) >= failures
    assert events(info_logs, "jobs.worker.slot-lost") == []


# -- rules 3 (lost-lease-cancels) and 4 (fenced-settle): a lost lease cancels the run; its late
# settle changes nothing ------------------


def test_lost_lease_cancels_the_run_and_its_late_settle_changes_nothing(
        alias: str, go: Path, info_logs: pytest.LogCaptureFixture) -> None:
    # rule 3 (lost-lease-cancels), rule 4 (fenced-settle)
    job = block_until.enqueue(str(go))
    with running_worker(alias, **FAST) as worker:
        run = running_run(worker, job.id)
        wait_until(started(job.id))
        # Another worker claims the row (as if this one had been presumed dead).
        thief_token = uuid.uuid4()
        Job.objects.using(alias).filter(id=job.id).update(
            claim_token=thief_token, worker_id="thief",
            visible_at=timezone.now() + timedelta(hours=1))
        wait_until(lambda: events(info_logs, "jobs.worker.settle-stale", job_id=job.id),
                   message="the late settle")
        assert worker.completer.stale == 1
    assert isinstance(run.scope.reason, LeaseLostError)
    assert events(info_logs, "jobs.worker.lease-lost", job_id=job.id,
                  worker_id=worker.worker_id)
    # The stale "done" changed nothing: the row is still the thief's, untouched.
    after = row(alias, job.id)
    assert (after.status, after.claim_token, after.worker_id, after.attempt, after.last_error) \
        == ("running", thief_token, "thief", 1, "")
    assert attempts(alias, job.id) == []


def test_cancel_requested_from_outside_cancels_the_run(alias: str, go: Path) -> None:
    # rule 3 (lost-lease-cancels): a job cancelled from outside stops at the next heartbeat
    job = block_until.enqueue(str(go))
    with running_worker(alias, **FAST) as worker:
        run = running_run(worker, job.id)
        wait_until(started(job.id))
        Job.objects.using(alias).filter(id=job.id).update(cancel_requested=True)
        wait_until(status_is(alias, job.id, "cancelled", "succeeded", "failed", "queued"))
    assert isinstance(run.scope.reason, CancelRequestedError)
    assert row(alias, job.id).status == "cancelled"
    assert attempts(alias, job.id) == [(1, "cancelled")]
    assert RunLog.objects.get(job_id=job.id).ended_at is None  # the body never finished


def test_a_cancel_request_is_not_lost_when_the_run_retries_first(alias: str) -> None:
    # A cancel request kept ("Cancellation is cooperative" in docs/guarantees.md): the
    # request lands while the run ends in a retry, so the job is cancelled, not run again.
    job = cancel_myself_then_fail.enqueue()
    with running_worker(alias):
        wait_until(lambda: finished(alias, job.id))
    assert row(alias, job.id).status == "cancelled"
    assert RunLog.objects.using(alias).filter(job_id=job.id, label="ran").count() == 1


# -- rule 8 (lost-slot-cancels): a lost slot cancels the run, is recorded, and the job runs again
# -------------------


class RecordingRenewals:
    """Mixin: every renew_many call's leases (by identity) and what it answered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.renewals: list[tuple[list[SlotHold], set[tuple[str, int, str]]]] = []

    def renew_many(self, held: Sequence[SlotHold], ttl: float) -> set[tuple[str, int, str]]:
        renewed = super().renew_many(held, ttl)  # type: ignore[misc]
        self.renewals.append((list(held), renewed))
        return renewed


@pytest.mark.parametrize("how", ["taken", "lapsed", "deleted"])
def test_lost_slot_cancels_records_and_requeues_without_burning_an_attempt(
        alias: str, go: Path, how: str, info_logs: pytest.LogCaptureFixture) -> None:
    # rule 8 (lost-slot-cancels), and rule 7 (fenced-slot-renewal): a lapsed slot answers "no" and
    # never revives itself)
    store_cls = type("RecordingStore", (RecordingRenewals, engine_store(alias)), {})
    store = store_cls(alias)
    job = worker_serial_block_until.enqueue(str(go))
    key = "job:worker_serial_block_until"
    with running_worker(alias, store=store, **FAST) as worker:
        run = running_run(worker, job.id)
        lease = run.slot
        assert lease is not None and (lease.key, lease.slot) == (key, 0)
        holder = f"{worker.worker_id}:{job.id}"
        leases = Slot.objects.using(alias).filter(key=key, slot=0)
        wait_until(lambda: any(lease in h and (key, 0, holder) in r for h, r in store.renewals),
                   message="one successful renewal")
        intruder_expiry = timezone.now() + timedelta(seconds=1.5)
        if how == "taken":
            assert leases.filter(holder=holder).update(holder="intruder:1",
                                                      expires_at=intruder_expiry) == 1
        elif how == "lapsed":
            assert leases.filter(holder=holder).update(
                expires_at=timezone.now() - timedelta(seconds=1)) == 1
        else:
            assert leases.filter(holder=holder).delete()[0] == 1

        wait_until(lambda: events(info_logs, "jobs.worker.slot-lost", job_id=job.id),
                   message="slot-lost")
        assert events(info_logs, "jobs.worker.slot-lost") == [
            {"worker_id": worker.worker_id, "job_id": job.id, "lease_key": key, "slot": 0}]
        wait_until(lambda: attempts(alias, job.id), message="the slot_lost attempt")
        if how == "taken":
            # The old run never extends the new holder's row.
            assert leases.get().expires_at == intruder_expiry
        go.touch()
        wait_until(status_is(alias, job.id, "succeeded", "failed", "cancelled"))
        wait_until(lambda: not Slot.objects.using(alias).exists(), message="slot released")

    assert isinstance(run.scope.reason, JobSlotLostError)
    assert run.slot_lost
    # Renewal stopped at the "no": no later renewal carried the lost lease.
    calls_with_lost = [i for i, (held, _) in enumerate(store.renewals)
                       if any(h is lease for h in held)]
    refused = [i for i in calls_with_lost
               if (key, 0, lease.holder) not in store.renewals[i][1]]
    assert refused and refused[0] == calls_with_lost[-1], "renewed a slot after losing it"

    after = row(alias, job.id)
    assert (after.status, after.attempt) == ("succeeded", 1)  # the lost run burned nothing
    assert attempts(alias, job.id) == [(1, "slot_lost"), (1, "succeeded")]
    lost = AttemptRecord.objects.using(alias).get(job_id=job.id, outcome="slot_lost")
    assert (lost.slot_key, lost.slot, lost.worker_id) == (key, 0, worker.worker_id)
    assert "lost fleet slot 0" in lost.error
    assert RunLog.objects.filter(job_id=job.id).count() == 2


# -- rule 9 (slot-held-while-body-runs): a release that raises never fails a settle
# -----------------------------------------


def test_release_that_raises_is_logged_and_the_job_still_succeeds(
        alias: str, info_logs: pytest.LogCaptureFixture) -> None:
    # rule 9 (slot-held-while-body-runs): a settled run's slot is kept for the next run of its kind
    # and released when the next claim brings none; a release that raises is logged and
    # swallowed, the slot left to lapse on its TTL, and the worker goes on claiming.
    class BrokenRelease(engine_store(alias)):  # type: ignore[misc,valid-type]
        def release_many(self, held: Sequence[SlotHold]) -> None:
            raise OperationalError("connection reset by peer")

    job = capped.enqueue(0.3)
    store = BrokenRelease(alias)
    with running_worker(alias, store=store, **FAST) as worker:
        wait_until(lambda: events(info_logs, "jobs.worker.lease-release-failed"),
                   message="the failed release")
        later = add.enqueue(2, 3)
        wait_until(lambda: row(alias, later.id).status == "succeeded",
                   message="a job claimed after the failed release")
        worker_id = worker.worker_id
    assert row(alias, job.id).status == "succeeded"
    assert attempts(alias, job.id) == [(1, "succeeded")]
    (logged, *_) = events(info_logs, "jobs.worker.lease-release-failed")
    assert logged["worker_id"] == worker_id and logged["slots"] == "job:capped[0]"
    # The slot was left to expire on its TTL, exactly as the release failing means.
    assert Slot.objects.using(alias).filter(holder=f"{worker_id}:{job.id}").count() == 1


# -- rules 5 (fleet-cap) and 6 (slot-renewed): a slot passes from run to run in the worker
# ----------------------------------------


def test_a_worker_passes_its_slot_from_run_to_run_and_gives_it_back_when_the_kind_runs_dry(
        alias: str) -> None:
    # rules 5 (fleet-cap) and 6 (slot-renewed): a settled run's slot is kept for the worker's next
    # run of the kind, with no slot statement, and goes back to the fleet once a claim brings no run
    # to use it, while the worker goes on running. The cap holds throughout: concurrency=1 runs
    # never overlap.
    class Counting(engine_store(alias)):  # type: ignore[misc,valid-type]
        acquires: list[list[str]] = []
        releases: list[list[SlotHold]] = []

        def acquire_many(self, key: str, limit: int, ttl: float,
                         holders: Sequence[str]) -> dict[str, SlotHold]:
            self.acquires.append(list(holders))
            return super().acquire_many(key, limit, ttl, holders)

        def release_many(self, held: Sequence[SlotHold]) -> None:
            self.releases.append(list(held))
            super().release_many(held)

    store = Counting(alias)
    ids = [serial.enqueue(0.01).id for _ in range(6)]
    with running_worker(alias, store=store, threads=2, **FAST):
        wait_until(lambda: Job.objects.using(alias).filter(
            id__in=ids, status="succeeded").count() == 6, message="six serial runs")
        wait_until(lambda: not Slot.objects.using(alias).exists(),
                   message="the slot released while the worker runs on")
    assert len(store.acquires) == 1, store.acquires
    assert [len(r) for r in store.releases] == [1]
    slots = set(AttemptRecord.objects.using(alias).filter(job_id__in=ids)
                .values_list("slot_key", "slot"))
    assert slots == {("job:serial", 0)}
    logs = list(RunLog.objects.filter(job_id__in=ids).order_by("started_at"))
    assert len(logs) == 6
    for before, after in itertools.pairwise(logs):
        assert before.ended_at is not None and before.ended_at <= after.started_at


def test_a_kept_slot_goes_back_while_every_thread_is_busy(alias: str, tmp_path: Path) -> None:
    # rules 5 (fleet-cap) and 6 (slot-renewed): the serial run's thread frees before its settle is
    # written, so the next claim takes long job B instead; once the settle is written the slot is
    # kept, and no claim comes while both threads are busy. It must go back to the fleet anyway.
    go = tmp_path / "go"

    class SlowSettle(engine_store(alias)):  # type: ignore[misc,valid-type]
        def settle(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
            time.sleep(0.3)
            return super().settle(settlements, worker_id)

    store = SlowSettle(alias)
    block_until.enqueue(str(go), "A")
    s = serial.enqueue(0.01).id
    b = block_until.enqueue(str(go), "B").id
    try:
        with running_worker(alias, store=store, threads=2, **FAST):
            wait_until(lambda: row(alias, s).status == "succeeded", message="the serial run")
            wait_until(lambda: row(alias, b).status == "running", message="B running")
            wait_until(lambda: not Slot.objects.using(alias).exists(),
                       message="the kept slot released while both threads are busy")
            assert store.slot_store.acquire("job:serial", 1, 3.0, "other:1") is not None
            assert row(alias, b).status == "running"
            go.touch()
    finally:
        go.touch()


def test_a_draining_worker_gives_back_the_slot_of_a_run_that_settles_meanwhile(
        alias: str, tmp_path: Path) -> None:
    # rule 6 (slot-renewed): once the worker stops claiming, a slot it would keep for
    # a next run only keeps other workers out for the grace period. A run that settles while a
    # longer one drains gives its slot straight back.
    go = tmp_path / "go"
    long = capped_clocked.enqueue(label="long", seconds=0.0, path=str(go)).id
    short = capped_clocked.enqueue(label="short", seconds=0.6).id
    leases = Slot.objects.using(alias).filter(key="job:capped_clocked")
    try:
        with running_worker(alias, threads=2, grace_period=30.0, **FAST) as worker:
            wait_until(lambda: leases.count() == 2, message="both runs holding their slots")
            worker.request_stop()
            wait_until(lambda: row(alias, short).status == "succeeded", message="the short run")
            wait_until(lambda: leases.count() == 1,
                       message="the short run's slot released while the long one drains")
            assert row(alias, long).status == "running"
            go.touch()
        assert not leases.exists()
        assert row(alias, long).status == "succeeded"
    finally:
        go.touch()


# -- rule 5 (fleet-cap): a job without concurrency never touches the slot table
# -----------------------------


def test_job_without_concurrency_never_touches_the_lease_table(alias: str) -> None:
    # rule 5 (fleet-cap)
    touched: list[str] = []

    class NoSlotCalls(engine_store(alias)):  # type: ignore[misc,valid-type]
        def acquire(self, key: str, limit: int, ttl: float, holder: str) -> SlotHold | None:
            touched.append(f"acquire {key}")
            return super().acquire(key, limit, ttl, holder)

        def renew_many(self, held: Sequence[SlotHold], ttl: float) -> set[tuple[str, int, str]]:
            touched.append(f"renew {held}")
            return super().renew_many(held, ttl)

        def release_many(self, held: Sequence[SlotHold]) -> None:
            touched.append(f"release {held}")
            super().release_many(held)


    ids = [add.enqueue(1, 2).id, record.enqueue(label="slow", seconds=1.0).id,
           flaky.enqueue(1).id]
    slot_rows: list[int] = []

    def all_done() -> bool:
        slot_rows.append(Slot.objects.using(alias).count())
        return Job.objects.using(alias).filter(id__in=ids, status="succeeded").count() == 3

    with running_worker(alias, store=NoSlotCalls(alias), **FAST):
        wait_until(all_done)
    assert touched == []
    assert set(slot_rows) == {0}
    assert AttemptRecord.objects.using(alias).exclude(slot_key="").count() == 0


# -- rule 10 (cap-kept-or-refused): no promise that does nothing
# -------------------------------------------------------


def test_runjobworker_refuses_concurrency_without_a_slot_store(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # rule 10 (cap-kept-or-refused)
    with override_settings(ULTJOBS={"DATABASE": alias, "STORE": no_slot_store_path(alias)}):
        assert get_store(alias).slot_store is None
        with pytest.raises(CommandError) as refused:
            call_command("runjobworker", database=alias, burst=True)
        message = str(refused.value)
        for name in ("capped", "serial", "worker_serial_block_until"):
            assert name in message
        assert not Worker.objects.using(alias).exists(), "the worker started anyway"

        # Only the capped jobs make it refuse: without them the same store runs jobs.
        for name, spec in job_registry.registered_jobs().items():
            if spec.concurrency:
                monkeypatch.delitem(job_registry._registry, name)
        job = add.enqueue(20, 22)
        call_command("runjobworker", database=alias, burst=True)
    assert (row(alias, job.id).status, row(alias, job.id).result) == ("succeeded", 42)


# -- rule 12 (unknown-job-parked): an unknown job is parked, not failed
# ----------------------------------------------


def test_unknown_job_is_parked_for_thirty_seconds_without_counting_an_attempt(
        alias: str, info_logs: pytest.LogCaptureFixture) -> None:
    # rule 12 (unknown-job-parked)
    (enqueued,) = get_store(alias).enqueue([NewJob(
        name="no.such.job", queue="default", priority=0, args=[], kwargs={}, max_attempts=3)])
    with running_worker(alias, **FAST) as worker:
        wait_until(lambda: attempts(alias, enqueued.id), message="the parked attempt")
        claims = worker.claim_statements
        wait_until(lambda: worker.claim_statements >= claims + 3, message="more claims")
    after = row(alias, enqueued.id)
    assert (after.status, after.attempt) == ("queued", 0)
    assert after.last_error == 'no job registered as "no.such.job"'
    (parked,) = AttemptRecord.objects.using(alias).filter(job_id=enqueued.id)
    assert parked.outcome == "suspended"
    assert parked.error == 'no job registered as "no.such.job"'
    assert after.claim_token is None
    hidden_for = (after.visible_at - parked.finished_at).total_seconds()
    assert 29.0 <= hidden_for <= 31.0
    (logged,) = events(info_logs, "jobs.worker.unknown-job", job_id=enqueued.id)
    # The first park of an episode says where a worker looks for jobs.
    assert logged["episode"] == "new" and "jobs.py" in logged["hint"], logged


# -- rule 13 (nothing-leaks): nothing leaks
# ---------------------------------------------------------------------


@pytest.fixture
def started_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Ids of the runs the worker put under its heartbeat (``run_job``'s ``on_started``)."""
    ids: list[int] = []
    real = dispatch.run_job

    def spy(run: Run, *, on_started: Callable[[], None], **kwargs: Any) -> Settlement:
        job_id = run.id

        def on_started_spy() -> None:
            ids.append(job_id)
            on_started()

        return real(run, on_started=on_started_spy, **kwargs)

    monkeypatch.setattr(dispatch, "run_job", spy)
    return ids


def test_bad_stored_args_fail_cleanly_before_the_run_starts(alias: str,
                                                            started_runs: list[int]) -> None:
    # rule 13 (nothing-leaks), part a
    bad = Job.objects.using(alias).create(name="capped", args={"x": 1}, kwargs={},
                                          max_attempts=3)
    good = capped.enqueue(0.01)
    with running_worker(alias, **FAST):
        wait_until(lambda: Job.objects.using(alias).filter(
            id__in=[bad.id, good.id], status__in=["succeeded", "failed"]).count() == 2)
        wait_until(lambda: not Slot.objects.using(alias).exists(), message="slots released")
    assert started_runs == [good.id]
    failed = row(alias, bad.id)
    assert (failed.status, failed.attempt) == ("failed", 1)
    assert failed.last_error.startswith(
        "arguments cannot be decoded: the stored args are a JSON object, not an array")
    assert attempts(alias, bad.id) == [(1, "failed")]
    assert row(alias, good.id).status == "succeeded"


def pg_backends(alias: str) -> set[int]:
    """The server processes of the connections to this test database."""
    with connections[alias].cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        return {pid for (pid,) in cur.fetchall()}


def test_stopped_worker_leaves_no_thread_and_no_connection(alias: str) -> None:
    # rule 13 (nothing-leaks), part b
    before = set(threading.enumerate())
    baseline = pg_backends(alias) if alias == "postgres" else None
    ids = [record.enqueue(label=f"r{i}", seconds=0.3).id for i in range(3)] + [
        capped.enqueue(0.3).id, flaky.enqueue(1).id]
    with running_worker(alias, threads=3, **FAST) as worker:
        wait_until(lambda: Job.objects.using(alias).filter(
            id__in=ids, status="succeeded").count() == len(ids))
        if baseline is not None:
            assert pg_backends(alias) - baseline  # the measure sees the worker's connections
    mine = [worker.heartbeat._thread, worker.completer._thread, *worker.pool._threads]
    assert [t.name for t in mine if t.is_alive()] == []
    leaked = [t.name for t in threading.enumerate()
              if t not in before and t.name.startswith("ultjobs-")]
    assert leaked == []
    if baseline is not None:
        # A closed connection leaves pg_stat_activity when its backend exits: wait for that.
        # Compared by process, not by count: a connection of an earlier test that closes
        # meanwhile must not hide one of this worker's that stays open.
        wait_until(lambda: not pg_backends(alias) - baseline, timeout=10,
                   message="the worker's PostgreSQL connections closed")


def test_nothing_of_a_run_is_held_after_it(alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # rule 13 (nothing-leaks), part c: the context, the run and its cancel scope are gone once the
    # settle is written
    run_refs: list[weakref.ref[Any]] = []
    real = dispatch.run_job

    def spy(run: Run, **kwargs: Any) -> Settlement:
        run_refs.append(weakref.ref(run))
        run_refs.append(weakref.ref(run.scope._lock))  # the scope itself has __slots__
        return real(run, **kwargs)

    monkeypatch.setattr(dispatch, "run_job", spy)
    testjobs.WORKER_CTX_REFS.clear()
    with running_worker(alias, threads=2, **FAST) as worker:
        ids = [worker_weakref_probe.enqueue().id for _ in range(3)]
        wait_until(lambda: Job.objects.using(alias).filter(
            id__in=ids, status="succeeded").count() == 3)
        wait_until(lambda: worker.completer.pending == 0 and len(worker.runs) == 0)
        # While the worker lives on, idle, nothing of the finished runs may be reachable. The
        # completer counts a batch written a moment before its frame lets the batch go, so
        # that moment is waited out; a run held for good still fails here.
        assert len(testjobs.WORKER_CTX_REFS) == 3 and len(run_refs) == 6

        def held() -> list[Any]:
            gc.collect()
            return [r() for r in [*testjobs.WORKER_CTX_REFS, *run_refs] if r() is not None]

        wait_until(lambda: held() == [], timeout=5, message="nothing of the runs held")


def test_a_transaction_a_body_leaves_open_ends_with_its_run(alias: str) -> None:
    # The next run on the same executor thread starts in autocommit, outside any transaction,
    # as a request after a view that did the same would (the reset after every run).
    opened = testjobs.leaves_a_transaction_open.enqueue(alias)
    after = testjobs.reports_its_connection.enqueue(alias)
    call_command("runjobworker", burst=True, database=alias, threads=1, poll_interval=0.05)
    assert row(alias, opened.id).status == "succeeded"
    report = row(alias, after.id)
    assert report.status == "succeeded"
    assert report.result == {"autocommit": True, "in_atomic_block": False}


def test_a_connection_whose_setup_failed_is_still_reset_after_each_run(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Django keeps a connection whose session setup raised (a connection_created receiver, or
    # the backend's init_connection_state) without ever sending connection_created: the reset
    # must not depend on that signal alone (rule 13 (nothing-leaks)).
    wrapper = type(connections[alias])
    setup = wrapper.init_connection_state
    failed: list[str] = []

    def fails_once(self: Any) -> None:
        if threading.current_thread().name.startswith("ultjobs-exec-") and not failed:
            failed.append(threading.current_thread().name)
            raise RuntimeError("session setup failed")
        setup(self)

    monkeypatch.setattr(wrapper, "init_connection_state", fails_once)
    first = testjobs.connects.enqueue(alias)
    opened = testjobs.leaves_a_transaction_open.enqueue(alias)
    after = testjobs.reports_its_connection.enqueue(alias)
    call_command("runjobworker", burst=True, database=alias, threads=1, poll_interval=0.05)
    assert failed and row(alias, first.id).status == "failed"
    assert row(alias, opened.id).status == "succeeded"
    report = row(alias, after.id)
    assert report.status == "succeeded"
    assert report.result == {"autocommit": True, "in_atomic_block": False}


def test_an_exception_that_cannot_print_itself_is_still_settled(alias: str) -> None:
    # rule 13 (nothing-leaks): the run is settled (not left running under the heartbeat) and the
    # executor thread survives to run the next job.
    bad = raises_unprintable.enqueue()
    with running_worker(alias, threads=1):
        wait_until(lambda: finished(alias, bad.id))
        after = add.enqueue(1, 1)
        wait_until(lambda: finished(alias, after.id))
    assert row(alias, bad.id).status == "failed"
    assert "Unprintable" in row(alias, bad.id).last_error
    assert row(alias, after.id).status == "succeeded"


# -- retries ------------------------------------------------------------------------------------


def test_job_that_always_fails_ends_failed_with_its_traceback(alias: str) -> None:
    # Bad input: retried up to max_attempts, then failed with the traceback kept
    job = worker_always_fails.enqueue()
    with running_worker(alias, **FAST):
        wait_until(status_is(alias, job.id, "failed", "succeeded", "cancelled"))
    after = row(alias, job.id)
    assert (after.status, after.attempt, after.claim_token) == ("failed", 3, None)
    assert after.last_error.startswith("Traceback (most recent call last):")
    assert "ValueError: worker_always_fails broke on attempt 3" in after.last_error
    assert after.finished_at is not None
    assert attempts(alias, job.id) == [(1, "retrying"), (2, "retrying"), (3, "failed")]
    assert sorted(RunLog.objects.filter(job_id=job.id).values_list("attempt", flat=True)) \
        == [1, 2, 3]
    retried = AttemptRecord.objects.using(alias).get(job_id=job.id, attempt=1)
    assert "worker_always_fails broke on attempt 1" in retried.error


def test_retry_waits_for_its_backoff(alias: str) -> None:
    # Bad input: exponential backoff with jitter (backoff=60: the retry is 30 to 60 s away)
    job = worker_fails_with_backoff.enqueue()
    with running_worker(alias, **FAST) as worker:
        wait_until(lambda: attempts(alias, job.id), message="the first attempt")
        claims = worker.claim_statements
        wait_until(lambda: worker.claim_statements >= claims + 3, message="more claims")
    after = row(alias, job.id)
    assert (after.status, after.attempt) == ("queued", 1)
    assert attempts(alias, job.id) == [(1, "retrying")]
    first = AttemptRecord.objects.using(alias).get(job_id=job.id)
    delay = (after.visible_at - first.finished_at).total_seconds()
    assert 30.0 - 0.01 <= delay <= 60.0 + 0.01
    assert "RuntimeError: worker_fails_with_backoff failed" in after.last_error


# -- graceful drain -----------------------------------------------------------------------------


def test_drain_lets_short_runs_finish_and_hands_back_long_ones(
        alias: str, go: Path, info_logs: pytest.LogCaptureFixture) -> None:
    # graceful drain: within grace the run succeeds; past it, cancelled and handed back unburned
    long = block_until.enqueue(str(go), label="long")
    short = record.enqueue(label="short", seconds=1.0)
    with running_worker(alias, grace_period=2.0, **FAST) as worker:
        long_run, short_run = running_run(worker, long.id), running_run(worker, short.id)
        wait_until(lambda: RunLog.objects.filter(job_id__in=[long.id, short.id]).count() == 2)
        worker.request_stop()
    assert short_run.scope.reason is None
    assert (row(alias, short.id).status, row(alias, short.id).attempt) == ("succeeded", 1)
    assert attempts(alias, short.id) == [(1, "succeeded")]

    assert isinstance(long_run.scope.reason, WorkerShutdownError)
    handed_back = row(alias, long.id)
    assert (handed_back.status, handed_back.attempt, handed_back.claim_token) \
        == ("queued", 0, None)
    assert handed_back.visible_at <= timezone.now()
    assert attempts(alias, long.id) == [(1, "interrupted")]
    assert events(info_logs, "jobs.worker.draining", worker_id=worker.worker_id)


def test_drain_hands_back_a_body_that_ignores_cancellation(
        alias: str, info_logs: pytest.LogCaptureFixture) -> None:
    # graceful drain: a body that never looks is handed back after cancel_wait; the worker stops
    job = ignore_cancel.enqueue(4.0)
    with running_worker(alias, grace_period=0.1, cancel_wait=0.3, **FAST) as worker:
        running_run(worker, job.id)
        stopping = time.monotonic()
    stopped_in = time.monotonic() - stopping
    try:
        assert stopped_in < 3.2, f"the worker waited {stopped_in:.1f}s for the body"
        after = row(alias, job.id)
        assert (after.status, after.attempt, after.claim_token) == ("queued", 0, None)
        assert attempts(alias, job.id) == [(1, "interrupted")]
        assert events(info_logs, "jobs.worker.run-abandoned", job_id=job.id)
    finally:
        # Let the abandoned body end so its thread does not outlive this test.
        wait_until(lambda: not any(t.is_alive() for t in worker.pool._threads), timeout=10)
    # When it does end, it does not settle again over the hand-back.
    assert attempts(alias, job.id) == [(1, "interrupted")]
    assert row(alias, job.id).status == "queued"


def test_a_drain_does_not_free_the_slot_of_a_body_that_ignores_it(alias: str) -> None:
    # rule 5 (fleet-cap): an abandoned body may still run until the process exits; its slot must
    # lapse on its TTL and its job come back only after a visibility timeout, not at once.
    job = capped_ignoring.enqueue(3.0)
    stopper = threading.Event()
    with running_worker(alias, threads=1, grace_period=0.1, cancel_wait=0.1,
                        visibility_timeout=5.0) as worker:
        wait_until(lambda: Job.objects.using(alias).get(pk=job.id).status == "running")
        stopper.set()
        worker.request_stop()
    row = Job.objects.using(alias).get(pk=job.id)
    assert row.status == "queued" and row.attempt == 0
    assert row.visible_at > timezone.now() + timedelta(seconds=2)
    assert Slot.objects.using(alias).filter(key="job:capped_ignoring").exists()
    # Let the abandoned body end so its thread does not outlive this test.
    wait_until(lambda: not any(t.is_alive() for t in worker.pool._threads), timeout=10)


# -- --burst ------------------------------------------------------------------------------------


def test_burst_drains_runnable_jobs_then_returns(alias: str) -> None:
    # --burst: everything runnable now (retries included), nothing that is not yet due
    now = [add.enqueue(i, i).id for i in range(5)]
    retried = flaky.enqueue(1)  # fails once, retried at once (backoff 0)
    later = add.using(delay=3600).enqueue(1, 1)
    call_command("runjobworker", burst=True, database=alias, poll_interval=0.05)
    done = Job.objects.using(alias).filter(id__in=[*now, retried.id], status="succeeded")
    assert done.count() == 6
    assert attempts(alias, retried.id) == [(1, "retrying"), (2, "succeeded")]
    pending = row(alias, later.id)
    assert (pending.status, pending.attempt) == ("queued", 0)
    assert attempts(alias, later.id) == []


def test_runjobworker_freezes_the_collector_only_in_a_process_of_its_own(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The command run as a process freezes what is loaded (its exit must not outlast the hold of
    # an abandoned job, rule 56 (overrun-reported)); from code (call_command, WorkerProcess) it
    # leaves the collector alone: the process is someone else's. The GIL's switch interval is
    # never changed.
    switch: list[float] = []
    monkeypatch.setattr(sys, "setswitchinterval", switch.append)
    seen: list[int] = []
    frozen = gc.get_freeze_count()  # Python 3.12 starts with a few hundred
    with running_worker(alias):
        pass
    assert gc.get_freeze_count() == frozen

    def run(self: WorkerProcess, *, install_signals: bool = True) -> int:
        seen.append(gc.get_freeze_count())
        return 0

    monkeypatch.setattr(WorkerProcess, "run", run)
    call_command("runjobworker", burst=True, database=alias)
    assert seen == [frozen]
    Command().run_from_argv(["manage.py", "runjobworker", "--burst", "--database", alias])
    # Everything loaded by then: Django's and the apps' objects number in the tens of thousands.
    assert len(seen) == 2 and seen[1] > frozen + 10_000
    assert switch == []


def test_runjobworker_as_a_process_refuses_before_it_freezes_anything(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # rule 10 (cap-kept-or-refused): a refused start changes nothing process-wide
    frozen = gc.get_freeze_count()
    with override_settings(ULTJOBS={"DATABASE": alias, "STORE": no_slot_store_path(alias)}), \
            pytest.raises(SystemExit):
        # run_from_argv prints a CommandError and exits, as manage.py does.
        Command().run_from_argv(["manage.py", "runjobworker", "--burst", "--database", alias])
    assert gc.get_freeze_count() == frozen


# -- queues and priority through the real worker -------------------------------------------------


def test_worker_never_runs_other_queues(alias: str) -> None:
    # claim: only the worker's queues
    other = add.using(queue="b").enqueue(1, 1)
    mine = add.using(queue="a").enqueue(2, 2)
    with running_worker(alias, queues=("a",), **FAST) as worker:
        wait_until(status_is(alias, mine.id, "succeeded"))
        claims = worker.claim_statements
        wait_until(lambda: worker.claim_statements >= claims + 5, message="more claims")
    assert (row(alias, other.id).status, row(alias, other.id).attempt) == ("queued", 0)
    assert attempts(alias, other.id) == []


def test_worker_runs_higher_priority_first(alias: str) -> None:
    # claim: priority order (higher first), through the real claim loop
    ids = [record.using(priority=p).enqueue(label=label).id
           for p, label in [(0, "low"), (10, "high"), (5, "mid"), (0, "low2")]]
    with running_worker(alias, threads=1, **FAST):
        wait_until(lambda: Job.objects.using(alias).filter(
            id__in=ids, status="succeeded").count() == 4)
    order = list(RunLog.objects.filter(job_id__in=ids).order_by("id")
                 .values_list("label", flat=True))
    assert order == ["high", "mid", "low", "low2"]


# -- the completer keeps the lease alive while a settle fails ------------------------------------


def test_completer_keeps_the_lease_alive_while_settle_fails(
        alias: str, info_logs: pytest.LogCaptureFixture) -> None:
    # Batch everything hot: a failing settle is retried, its run still heartbeated
    # (rules 1 (leased-claim), 4 (fenced-settle))
    outage = 2.5  # more than twice the lease below

    class SettleOutage(engine_store(alias)):  # type: ignore[misc,valid-type]
        ends: float | None = None
        failed = 0
        applied: list[int] = []

        def settle(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
            if self.ends is None:
                self.ends = time.monotonic() + outage
            if time.monotonic() < self.ends:
                self.failed += 1
                raise OperationalError("the database system is shutting down")
            done = super().settle(settlements, worker_id)
            self.applied.extend(done)
            return done

    store = SettleOutage(alias)
    job = record.enqueue(label="once")
    with running_worker(alias, store=store, visibility_timeout=1.0,
                        heartbeat_interval=0.2) as worker:
        wait_until(status_is(alias, job.id, "succeeded", "failed", "cancelled"), timeout=15)
        assert worker.completer.stale == 0
    assert store.failed >= 3
    assert store.applied.count(job.id) == 1
    assert (row(alias, job.id).status, row(alias, job.id).attempt) == ("succeeded", 1)
    assert attempts(alias, job.id) == [(1, "succeeded")]
    assert RunLog.objects.filter(job_id=job.id).count() == 1, "re-delivered during the outage"
    assert events(info_logs, "jobs.worker.redelivered") == []
    assert len(events(info_logs, "jobs.worker.settle-failed")) == store.failed


def test_other_kinds_still_run_while_a_capped_backlog_drains(alias: str) -> None:
    # No head-of-line blocking: a worker busy with only capped kinds leaves the scan for the
    # other kinds out of its claims, but looks again at least once per poll interval, so a job
    # of another kind that becomes due without any notification (a delay, a retry's backoff)
    # runs long before the capped backlog is through.
    serial_ids = serial.bulk_enqueue([(0.05,)] * 60)  # 3 s at concurrency=1
    with running_worker(alias, threads=4, poll_interval=0.2) as worker:
        wait_until(lambda: Job.objects.using(alias).filter(
            id__in=serial_ids, status="succeeded").count() >= 3, timeout=15)
        due_later = add.using(delay=0.3).enqueue(2, 3)
        wait_until(status_is(alias, due_later.id, "succeeded"), timeout=15)
        waiting = Job.objects.using(alias).filter(id__in=serial_ids).exclude(
            status="succeeded").count()
        assert waiting >= 20, f"only {waiting} capped runs left: the other kind waited behind them"
        assert worker.claim_statements < 1000


def test_a_job_of_another_kind_cut_from_a_full_capped_claim_runs_in_priority_order(
        alias: str) -> None:
    # The other direction of the test above: a claim that cut a runnable job of another kind
    # (it ranked below the capped runs it took) must look at the other kinds again next time, or
    # that job would wait out the whole poll interval behind capped runs it outranks.
    capped.using(priority=9).bulk_enqueue([(0.02,)] * 2)
    (other,) = record.using(priority=5).bulk_enqueue([("other",)])
    capped.bulk_enqueue([(0.02,)] * 10)  # priority 0
    with running_worker(alias, threads=1, poll_interval=30.0):
        wait_until(status_is(alias, other, "succeeded"), timeout=15)
    started = list(RunLog.objects.using(alias).order_by("id").values_list("label", "job_id"))
    first_other = [label for label, _ in started].index("other")
    assert first_other == 2, f"ran after {first_other} capped runs: {started}"


def test_claiming_stops_while_the_completer_cannot_write(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing leaks (rule 13 (nothing-leaks)): finished runs waiting for their settle are bounded,
    # so a completer that falls behind slows the claim loop down instead of growing the worker's
    # memory (and its heartbeat statement) with every job it goes on claiming.
    monkeypatch.setattr(claim_loop, "MAX_UNSETTLED", 5)
    outage = threading.Event()
    outage.set()

    store = settle_outage_store(alias, outage)

    ids = add.bulk_enqueue([(i, i) for i in range(40)])
    with running_worker(alias, store=store, threads=2,
                        visibility_timeout=10.0, heartbeat_interval=0.5) as worker:
        wait_until(lambda: worker.completer.pending >= 5, timeout=15)
        claims = worker.claim_statements
        time.sleep(0.5)  # several polls: the loop must not have claimed on meanwhile
        running = Job.objects.using(alias).filter(id__in=ids, status="running").count()
        # At most the bound plus one claim of the two threads that saw room under it.
        assert running <= 5 + 2, running
        assert worker.claim_statements - claims <= 1
        outage.clear()
        wait_until(lambda: Job.objects.using(alias).filter(id__in=ids, status="succeeded")
                   .count() == len(ids), timeout=30)
    assert worker.completer.stale == 0


def test_a_thread_that_frees_up_wakes_a_claim_loop_of_two_lanes(alias: str) -> None:
    # rule 98 (freed-place-wakes-claim)
    # With an async kind registered (tests.testapp.jobs has several) the
    # claim loop waits for either lane. Its one thread ran the first job, whose settle cannot be
    # written (an outage): nothing but that settle or the poll interval (30 s) told the loop
    # that the thread was free for the second.
    assert any(spec.is_coroutine for spec in job_registry.registered_jobs().values())
    outage = threading.Event()
    outage.set()
    store = settle_outage_store(alias, outage)
    add.bulk_enqueue([(1, 1), (2, 2)])
    with running_worker(alias, store=store, threads=1, poll_interval=30.0,
                        visibility_timeout=10.0, heartbeat_interval=0.5) as worker:
        wait_until(lambda: worker.completer.pending >= 2, timeout=10,
                   message="the second job ran while the first one's settle waited")
        outage.clear()
        wait_until(lambda: Job.objects.using(alias).filter(status="succeeded").count() == 2,
                   timeout=15)


def test_kept_slots_stay_for_the_runs_of_a_round_whose_other_claim_failed() -> None:
    # rule 99 (half-failed-round)
    # A round of two lanes makes two claims. One failing gave back every kept slot the round was
    # offered, before the runs the other claim brought (counting on them) were given theirs:
    # each then needed a new slot, which another worker may have taken meanwhile. They stay
    # for those runs; only what no run took goes back, after the dispatch (rule 6 (slot-renewed)).
    slot_store = StubSlots()
    worker = WorkerProcess(WorkerOptions(threads=2, listen=False))
    worker.slots = FleetSlots(slot_store, WORKER, ttl=30.0,  # type: ignore[arg-type]
                              clock=MonotonicClock())
    first = Run(job=claimed(1, "capped"), spec=job_registry.get_job("capped"))
    assert worker.slots.acquire_group([first]) == []
    worker.slots.keep([first])
    loop = LoopState(caps={"capped": 2},
                                    async_names=frozenset({"async_add"}),
                                    free_sync=1, free_async=1)
    kept = worker.slots.offer(loop.caps)
    answers: list[Any] = [OperationalError("the async lane's claim failed"),
                          [claimed(2, "capped")]]

    def claim(**kwargs: Any) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    worker.store.claim = claim  # type: ignore[method-assign]
    got = worker.claims.claim(loop, 2, kept=kept)
    assert got is not None and [job.id for job in got] == [2]
    assert slot_store.released == [] and worker.slots.kept == 1
    second = Run(job=got[0], spec=job_registry.get_job("capped"))
    assert worker.slots.acquire_group([second]) == []
    assert second.slot == first.slot and len(slot_store.acquired) == 1


def test_an_async_place_freed_while_a_round_starts_is_claimed_by_that_round() -> None:
    # rule 98 (freed-place-wakes-claim)
    # The round read the lanes (no async place free), then cleared its wake-up before the
    # claim. A place the async lane freed in between set the wake-up that clear dropped, and
    # the round, seeing no async room, claimed nothing for that lane and waited for the next
    # place to free: with runs that end together, a whole body's time.
    # The round reads the lanes after the clear.
    worker = WorkerProcess(WorkerOptions(threads=1, async_concurrency=2, listen=False,
                                         poll_interval=0.01))
    plans: list[dict[str, Any]] = []

    def claim(**kwargs: Any) -> Any:
        plans.append(kwargs)
        return []

    worker.store.claim = claim  # type: ignore[method-assign]
    # What _room read a moment ago: the thread free, both async places held. Both have freed
    # since (the lane is idle), waking the loop before the round cleared that wake-up.
    loop = LoopState(async_names=frozenset({"async_add"}), free_sync=1, free_async=0)
    worker.claims.round(loop, 1)
    assert (2, False, {"async_add": 2}) in [(p["limit"], p["uncapped"], p["caps"]) for p in plans]


@pytest.fixture(autouse=True)
def _no_stray_worker_threads() -> Iterator[None]:
    """Fail loudly if a test leaves a worker's threads running into the next one."""
    before = set(threading.enumerate())
    yield
    stray = [t.name for t in threading.enumerate()
             if t.name.startswith("ultjobs-") and t.is_alive() and t not in before]
    assert stray == [], f"threads left running: {stray}"
