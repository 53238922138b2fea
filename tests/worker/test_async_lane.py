"""The async lane inside one worker (on a thread of the test): the same lease, slot and
cancellation as a sync run (rules 85 (one-event-loop) and 86 (async-cancel)), on both engines."""

from __future__ import annotations

import pytest

from django_ultjobs.models import AttemptRecord, Job, Slot
from tests.conftest import running_worker, wait_until
from tests.testapp.jobs import async_capped_stuck, async_stuck

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

FAST = {"visibility_timeout": 1.0, "heartbeat_interval": 0.25, "poll_interval": 0.05}


def test_an_async_run_keeps_its_lease_past_the_visibility_timeout(alias: str) -> None:
    # rules 1 (leased-claim) and 85 (one-event-loop): registered in the runs in flight like a sync
    # run, so the heartbeat keeps it: three visibility timeouts long, it is neither re-delivered nor
    # lost.
    job = async_stuck.enqueue(3.0)
    with running_worker(alias, **FAST):
        wait_until(lambda: Job.objects.using(alias).get(id=job.id).status == "succeeded",
                   timeout=30, message="the async job to succeed")
    assert list(AttemptRecord.objects.using(alias).filter(job_id=job.id)
                .values_list("attempt", "outcome")) == [(1, "succeeded")]


def test_a_lost_slot_cancels_a_stuck_async_body(alias: str) -> None:
    # rules 8 (lost-slot-cancels) and 86 (async-cancel): the slot lapses under its holder; the
    # renewal's "no" cancels the task at its await, the attempt is slot_lost (not burned) and the
    # job runs again.
    job = async_capped_stuck.enqueue()
    slots = Slot.objects.using(alias).filter(holder__endswith=f":{job.id}")
    with running_worker(alias, **FAST):
        wait_until(slots.exists, message="the slot to be held")
        wait_until(lambda: Job.objects.using(alias).get(id=job.id).status == "running",
                   message="the job to run")
        slots.delete()
        wait_until(lambda: Job.objects.using(alias).get(id=job.id).status == "succeeded",
                   timeout=30, message="the job to run again and succeed")
    row = Job.objects.using(alias).get(id=job.id)
    assert row.result == 2 and row.attempt == 1
    assert list(AttemptRecord.objects.using(alias).filter(job_id=job.id).order_by("id")
                .values_list("outcome", flat=True)) == ["slot_lost", "succeeded"]


def test_a_lost_lease_cancels_a_stuck_async_body(alias: str) -> None:
    # rules 3 (lost-lease-cancels) and 86 (async-cancel): another claim owns the row now; the task
    # is cancelled and its settle, fenced on the old token, changes nothing
    # (rule 4 (fenced-settle)).
    job = async_stuck.enqueue()
    rows = Job.objects.using(alias).filter(id=job.id)
    with running_worker(alias, **FAST) as worker:
        wait_until(lambda: worker.async_lane.busy == 1, message="the body to run")
        wait_until(lambda: worker.runs.snapshot(), message="the run under the heartbeat")
        rows.update(claim_token="00000000-0000-0000-0000-000000000001")
        wait_until(lambda: worker.async_lane.busy == 0, timeout=10,
                   message="the body to be cancelled")
        wait_until(lambda: worker.completer.pending == 0, message="the stale settle")
        assert worker.completer.stale == 1
    assert rows.get().status == "running"
