"""The heartbeat, fleet slots and executor driven by hand: no threads, no database, no timing.

Engine-agnostic: these pin how the worker READS the store's answers (an exception is not a "no",
an absent row is), which is the same code on every engine. ``test_worker_rules.py`` proves the
same rules end to end on SQLite and PostgreSQL.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import OperationalError

from django_ultjobs.core.slot_keys import slot_key_for
from django_ultjobs.exceptions import CancelRequestedError, JobSlotLostError, LeaseLostError
from django_ultjobs.jobs.registry import get_job
from django_ultjobs.models import AttemptOutcome, JobStatus
from django_ultjobs.worker.executor import run_job
from django_ultjobs.worker.fleet_slots import FleetSlots
from django_ultjobs.worker.heartbeat import Heartbeat
from django_ultjobs.worker.options import WorkerOptions
from django_ultjobs.worker.runs import Run, RunsInFlight
from django_ultjobs.worker.worker_row import WorkerRow
from tests.doubles import WORKER, StubSlots, StubStore, claimed

#: What run_job hands the step ledger and the progress writer; these jobs write no steps and no
#: progress, so neither is ever called.
STORE: Any = SimpleNamespace(save_progress=None)


def make_heartbeat() -> tuple[Heartbeat, StubStore, StubSlots, RunsInFlight]:
    store, slot_store, registry = StubStore(), StubSlots(), RunsInFlight()
    slots = FleetSlots(slot_store, WORKER, ttl=3.0)  # type: ignore[arg-type]
    row = WorkerRow(store, WorkerOptions(worker_id=WORKER),  # type: ignore[arg-type]
                    overrunning=list)
    heartbeat = Heartbeat(store=store, runs=registry, slots=slots,  # type: ignore[arg-type]
                    row=row, visibility_timeout=3.0, interval=0.5)
    return heartbeat, store, slot_store, registry


def acquire(slots: FleetSlots, run: Run) -> bool:
    """Take a slot for one run as the claim loop does for a group; False when all are held."""
    return not slots.acquire_group([run])


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, Any]]:
    return [r.ultjobs for r in list(caplog.records)
            if getattr(r, "ultjobs_event", None) == name]


def test_failing_heartbeat_is_not_a_lost_lease_only_an_explicit_no_is(
        caplog: pytest.LogCaptureFixture) -> None:
    # rule 2 (heartbeat-retried): an exception is retried at the next heartbeat;
    # rule 3 (lost-lease-cancels): an absent row cancels.
    caplog.set_level(logging.INFO, logger="django_ultjobs")
    heartbeat, store, _, registry = make_heartbeat()
    run = Run(job=claimed(), spec=get_job("record"))
    registry.add(run)

    store.answer = OperationalError("server closed the connection unexpectedly")
    for _ in range(5):
        heartbeat.beat()
    assert len(store.heartbeats) == 5, "every heartbeat must be tried again"
    assert not run.scope.cancelled
    assert len(events(caplog, "jobs.worker.heartbeat-failed")) == 5
    assert events(caplog, "jobs.worker.lease-lost") == []

    store.answer = {run.id: False}  # held, nobody asked to cancel: a falsy answer is not a "no"
    heartbeat.beat()
    assert not run.scope.cancelled

    store.answer = {}  # the explicit "no": no row matched the fence
    heartbeat.beat()
    assert isinstance(run.scope.reason, LeaseLostError)
    assert events(caplog, "jobs.worker.lease-lost") == [
        {"worker_id": WORKER, "job_id": run.id, "attempt": 1}]


def test_heartbeat_no_for_a_settling_run_is_not_a_loss() -> None:
    # rule 4 (fenced-settle): a run whose settle is being written may simply have settled first.
    heartbeat, store, _, registry = make_heartbeat()
    run = Run(job=claimed(), spec=get_job("record"))
    run.settling = True
    registry.add(run)
    store.answer = {}
    heartbeat.beat()
    assert not run.scope.cancelled


def test_cancel_requested_answer_cancels_with_cancel_requested() -> None:
    # rule 3 (lost-lease-cancels): a job cancelled from outside stops at the next heartbeat.
    heartbeat, store, _, registry = make_heartbeat()
    run = Run(job=claimed(), spec=get_job("record"))
    registry.add(run)
    store.answer = {run.id: True}
    heartbeat.beat()
    assert isinstance(run.scope.reason, CancelRequestedError)


def test_slot_renewal_that_raises_is_not_a_loss_an_explicit_no_cancels_and_stops_renewal(
        caplog: pytest.LogCaptureFixture) -> None:
    # rule 2 (heartbeat-retried) for slots, rules 7 (fenced-slot-renewal) and 8 (lost-slot-cancels).
    caplog.set_level(logging.INFO, logger="django_ultjobs")
    heartbeat, store, slot_store, registry = make_heartbeat()
    run = Run(job=claimed(7, "capped"), spec=get_job("capped"))
    assert acquire(heartbeat.slots, run)
    hold = run.slot
    assert hold is not None and hold.holder == f"{WORKER}:7"
    registry.add(run)
    store.answer = {run.id: False}

    slot_store.renewed = OperationalError("database is locked")
    for _ in range(4):
        heartbeat.beat()
    assert len(slot_store.renew_calls) == 4
    assert not run.scope.cancelled and not run.slot_lost
    assert len(events(caplog, "jobs.worker.slot-renew-failed")) == 4

    slot_store.renewed = {(hold.key, hold.slot, hold.holder)}
    heartbeat.beat()
    assert not run.scope.cancelled

    slot_store.renewed = set()  # another holder took it, or it lapsed
    heartbeat.beat()
    assert isinstance(run.scope.reason, JobSlotLostError)
    assert (run.scope.reason.key, run.scope.reason.slot) == (slot_key_for("capped"), 0)
    assert run.slot_lost
    assert events(caplog, "jobs.worker.slot-lost") == [
        {"worker_id": WORKER, "job_id": 7, "lease_key": "job:capped", "slot": 0}]

    # Renewal stops: extending a slot this worker no longer holds would push out someone else's.
    calls = len(slot_store.renew_calls)
    slot_store.renewed = {(hold.key, hold.slot, hold.holder)}
    for _ in range(3):
        heartbeat.beat()
    assert all(hold not in call for call in slot_store.renew_calls[calls:])
    assert len(events(caplog, "jobs.worker.slot-lost")) == 1

    # ... and a lost slot is neither kept for a next run nor released (it may be somebody
    # else's row now).
    heartbeat.slots.keep([run])
    assert heartbeat.slots.kept == 0
    heartbeat.slots.release_all()
    assert slot_store.released == []


def test_release_that_raises_is_logged_and_swallowed(caplog: pytest.LogCaptureFixture) -> None:
    # rule 9 (slot-held-while-body-runs)
    caplog.set_level(logging.INFO, logger="django_ultjobs")
    heartbeat, _, slot_store, _ = make_heartbeat()
    run = Run(job=claimed(3, "capped"), spec=get_job("capped"))
    assert acquire(heartbeat.slots, run)
    heartbeat.slots.keep([run])
    heartbeat.slots.offer({"capped": 2})
    slot_store.release_error = OperationalError("deadlock detected")
    heartbeat.slots.release_unused()  # must not raise
    assert slot_store.released == [[run.slot]]
    (logged,) = events(caplog, "jobs.worker.lease-release-failed")
    assert logged["worker_id"] == WORKER and logged["slots"] == "job:capped[0]"
    # Not kept either: it lapses on its TTL, never renewed again.
    assert heartbeat.slots.kept == 0


def test_job_without_concurrency_never_touches_the_slot_store() -> None:
    # rule 5 (fleet-cap)
    heartbeat, store, slot_store, registry = make_heartbeat()
    run = Run(job=claimed(5, "record"), spec=get_job("record"))
    assert acquire(heartbeat.slots, run) is True
    assert run.slot is None
    registry.add(run)
    store.answer = {run.id: False}
    heartbeat.beat()
    heartbeat.slots.keep([run])
    heartbeat.slots.offer({"capped": 2})
    heartbeat.slots.release_unused()
    heartbeat.slots.release_all()
    assert (slot_store.acquired, slot_store.renew_calls, slot_store.released) == ([], [], [])


@pytest.mark.parametrize(("args", "kwargs", "what"), [
    ({"x": 1}, {}, "args"),
    ([], ["not", "a", "dict"], "kwargs"),
])
def test_bad_stored_arguments_fail_before_the_run_is_started(args: Any, kwargs: Any,
                                                              what: str) -> None:
    # rule 13 (nothing-leaks): anything that can raise happens before the run is put under the
    # heartbeat.
    run = Run(job=claimed(9, "add", args=args, kwargs=kwargs), spec=get_job("add"))
    started: list[int] = []
    settlement = run_job(run, store=STORE, worker_id=WORKER,
                         on_started=lambda: started.append(run.id))
    assert started == []
    assert (settlement.status, settlement.outcome) == (JobStatus.FAILED, AttemptOutcome.FAILED)
    assert settlement.error is not None and f"the stored {what} of this job" in settlement.error


def test_good_arguments_start_the_run_once() -> None:
    # rule 13 (nothing-leaks): the counterpart of the test above, so it cannot pass by never calling
    # on_started.
    run = Run(job=claimed(10, "add", args=[2, 3]), spec=get_job("add"))
    started: list[int] = []
    settlement = run_job(run, store=STORE, worker_id=WORKER,
                         on_started=lambda: started.append(run.id))
    assert started == [10]
    assert (settlement.status, settlement.result_json) == (JobStatus.SUCCEEDED, "5")
