"""The run's cancel scope: one signal, many causes, the first cause wins
(rules 3 (lost-lease-cancels), 8 (lost-slot-cancels), 11 (cooperative-cancel))."""

from __future__ import annotations

import threading
import time

import pytest

from django_ultjobs.exceptions import (
    CancelRequestedError,
    JobCancelledError,
    JobSlotLostError,
    LeaseLostError,
    WorkerShutdownError,
)
from django_ultjobs.runtime.cancel import CancelScope


def test_a_new_scope_is_not_cancelled() -> None:
    scope = CancelScope()
    assert (scope.cancelled, scope.reason) == (False, None)
    scope.raise_if_cancelled()
    assert scope.wait(0) is False


def test_the_first_reason_wins() -> None:  # rules 3 (lost-lease-cancels), 8 (lost-slot-cancels)
    scope = CancelScope()
    lost = LeaseLostError("another worker holds job 1")
    assert scope.cancel(lost) is True
    assert scope.cancel(JobSlotLostError(job="j", job_id=1, key="job:j", slot=0)) is False
    assert scope.cancel(CancelRequestedError("admin")) is False
    assert scope.cancelled and scope.reason is lost
    with pytest.raises(LeaseLostError) as caught:
        scope.raise_if_cancelled()
    assert caught.value is lost
    assert scope.wait(0) is True


def test_racing_causes_fire_the_signal_once() -> None:
    scope = CancelScope()
    reasons = [WorkerShutdownError(f"cause {i}") for i in range(16)]
    winners: list[JobCancelledError] = []
    start = threading.Barrier(len(reasons))

    def fire(reason: JobCancelledError) -> None:
        start.wait()
        if scope.cancel(reason):
            winners.append(reason)

    threads = [threading.Thread(target=fire, args=(r,)) for r in reasons]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    assert scope.reason is winners[0]


def test_a_waiter_wakes_when_cancelled() -> None:
    scope = CancelScope()
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(scope.wait(30)))
    waiter.start()
    scope.cancel(CancelRequestedError("admin"))
    waiter.join(10)
    assert woke == [True]


def test_a_lost_slot_names_job_key_and_slot() -> None:  # rule 8 (lost-slot-cancels)
    error = JobSlotLostError(job="report", job_id=42, key="job:report", slot=1)
    assert (error.job, error.job_id, error.key, error.slot, error.cause) == (
        "report", 42, "job:report", 1, "slot_lost")
    assert "report" in str(error) and "42" in str(error) and "job:report" in str(error)
    assert isinstance(error, JobCancelledError)


@pytest.mark.parametrize(("error", "cause"), [
    (JobCancelledError(), "cancelled"), (LeaseLostError(), "lease_lost"),
    (CancelRequestedError(), "cancel_requested"), (WorkerShutdownError(), "worker_shutdown"),
])
def test_each_cause_has_a_stable_name(error: JobCancelledError, cause: str) -> None:
    assert error.cause == cause


def test_a_wait_after_the_cancel_returns_at_once() -> None:
    # The event is made only when a body first waits: a cancel that came before must still be
    # seen, not waited out.
    scope = CancelScope()
    scope.cancel(CancelRequestedError("stop"))
    started = time.monotonic()
    assert scope.wait(30) is True
    assert time.monotonic() - started < 1


def test_cancels_racing_first_waits_are_never_lost() -> None:
    # Each round: one thread makes the scope's first wait while another cancels it; the waiter
    # must always wake (a cancel that set no event, or an event made after the cancel, would
    # leave it waiting out its 5 s).
    for _ in range(200):
        scope = CancelScope()
        woke: list[bool] = []
        waiter = threading.Thread(target=lambda s=scope, w=woke: w.append(s.wait(5)))
        waiter.start()
        scope.cancel(CancelRequestedError("stop"))
        waiter.join(6)
        assert woke == [True]
