"""The worker's timer of run deadlines, on real threads and no database: the timer cancels a run
at its deadline, a sooner deadline wakes it, a cancelled body is given ``--cancel-wait`` from the
cancel's delivery, and runs that end leave nothing behind (rules 55 (timeout-cancels),
56 (overrun-reported), 130 (timeout-on-time) to 132 (timeout-recorded), 134 (one-deadline-timer)).
"""

from __future__ import annotations

import gc
import time
import weakref
from datetime import UTC, datetime

from django_ultjobs.exceptions import CancelRequestedError, JobTimeoutError
from django_ultjobs.store import ClaimedJob
from django_ultjobs.worker.deadlines import COMPACT_AT, Deadlines, body_over
from django_ultjobs.worker.runs import Run
from tests.conftest import wait_until


def make_run(job_id: int, timeout: float | None) -> Run:
    job = ClaimedJob(id=job_id, name="timed", queue="default", priority=0, args=[], kwargs={},
                     attempt=1, max_attempts=3, token=f"t{job_id}", traceparent="",
                     tracestate="", enqueued_by="", cancel_requested=False,
                     claimed_at=datetime.now(UTC), timeout=timeout)
    run = Run(job=job, spec=None)
    run.mark_started()
    return run


class Timer:
    """A started ``Deadlines`` that records its overrun reports, stopped by ``close``."""

    def __init__(self, grace: float) -> None:
        self.reports: list[float] = []
        self.changes = 0
        self.deadlines = Deadlines(store=None, worker_id="t", grace=grace,  # type: ignore[arg-type]
                                   on_overrun=lambda: self.reports.append(time.monotonic()),
                                   on_change=self._changed)
        self.deadlines.start()

    def _changed(self) -> None:
        self.changes += 1

    def close(self) -> None:
        self.deadlines.stop()


def test_the_timer_cancels_a_run_at_its_deadline_and_a_sooner_one_wakes_it() -> None:
    """rule 130 (timeout-on-time): a run due in an hour is watched first, then one due in 50 ms:
    the timer, asleep until the first, is woken and cancels the second within a few ms of its
    deadline with ``JobTimeoutError``; the first is untouched."""
    timer = Timer(grace=5.0)
    try:
        later, soon = make_run(1, 3600.0), make_run(2, 0.05)
        timer.deadlines.watch(later)
        time.sleep(0.05)  # the timer is asleep on the hour-long deadline now
        soon.mark_started()
        timer.deadlines.watch(soon)
        wait_until(lambda: soon.scope.cancelled, timeout=2, interval=0.001,
                   message="the timer to cancel the run")
        late = time.monotonic() - (soon.deadline or 0.0)
        assert isinstance(soon.scope.reason, JobTimeoutError)
        assert late < 0.05, late
        assert not later.scope.cancelled
    finally:
        timer.close()


def test_overrunning_counts_from_the_cancel_delivered_and_a_body_that_stops_is_not_reported(
        ) -> None:
    """rule 131 (overrun-from-delivery): with a cancel wait of 0.3 s, a timed-out body that stops
    0.2 s after its cancel is never reported; one that runs on is reported once, 0.3 s after its
    cancel, and its entry on the overrunning list goes when it is forgotten."""
    timer = Timer(grace=0.3)
    try:
        stops, ignores = make_run(1, 0.02), make_run(2, 0.02)
        timer.deadlines.watch(stops)
        timer.deadlines.watch(ignores)
        wait_until(lambda: stops.scope.cancelled and ignores.scope.cancelled, timeout=2,
                   interval=0.001, message="both runs to be cancelled")
        cancelled_at = time.monotonic()
        time.sleep(0.2)
        body_over(stops)
        wait_until(lambda: timer.reports, timeout=3, interval=0.005,
                   message="the overrun to be reported")
        time.sleep(0.3)
        assert len(timer.reports) == 1
        assert timer.reports[0] - cancelled_at >= 0.3 - 0.01
        assert [e["job_id"] for e in timer.deadlines.overrunning] == [2]
        ignores.settling = True
        timer.deadlines.forget(ignores)
        assert timer.deadlines.overrunning == []
        assert timer.changes == 2  # listed, then unlisted: the heartbeat writes the row each time
    finally:
        timer.close()


def test_a_run_cancelled_otherwise_first_is_not_timed_out_nor_reported() -> None:
    """rule 55 (timeout-cancels): the first cause wins; a run cancelled on request before its
    deadline keeps that reason and is never reported overrunning by the timer."""
    timer = Timer(grace=0.05)
    try:
        run = make_run(1, 0.05)
        run.scope.cancel(CancelRequestedError("asked"))
        timer.deadlines.watch(run)
        time.sleep(0.3)
        assert isinstance(run.scope.reason, CancelRequestedError)
        assert timer.reports == [] and timer.deadlines.overrunning == []
    finally:
        timer.close()


def test_a_body_that_ends_past_its_deadline_unseen_is_timed_out() -> None:
    """rule 132 (timeout-recorded): a body that returns after its deadline before any timer
    fired (no timer here) is cancelled as it ends, so its settlement reads ``JobTimeoutError``;
    one that ends in time, or one with no timeout, has no reason."""
    past = make_run(1, 0.01)
    time.sleep(0.02)
    assert isinstance(body_over(past), JobTimeoutError)
    assert past.over
    assert body_over(make_run(2, 60.0)) is None
    assert body_over(make_run(3, None)) is None


def test_runs_that_end_leave_nothing_in_the_timer() -> None:
    """rule 13 (nothing-leaks); rule 134 (one-deadline-timer): 5,000 runs with an hour-long
    timeout, each forgotten when it ends, leave at most about twice ``COMPACT_AT`` blank entries
    in the heap, and no run is kept alive by it."""
    timer = Timer(grace=5.0)
    try:
        refs = []
        for i in range(5000):
            run = make_run(i, 3600.0)
            timer.deadlines.watch(run)
            run.over = True
            timer.deadlines.forget(run)
            refs.append(weakref.ref(run))
        del run
        assert timer.deadlines.pending <= 2 * COMPACT_AT + 2
        gc.collect()
        assert not any(ref() is not None for ref in refs)
    finally:
        timer.close()
