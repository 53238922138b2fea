"""The claim loop's batch lookup of ``RunsInFlight`` finds each run's
older runs of its job; a slotted ``Run`` still settles once and can be watched going
(rule 13 (nothing-leaks))."""

from __future__ import annotations

import gc
import threading
import weakref
from datetime import UTC, datetime

from django_ultjobs.store import ClaimedJob
from django_ultjobs.worker.runs import Run, RunsInFlight


def _run(job_id: int, token: str) -> Run:
    job = ClaimedJob(id=job_id, name="add", queue="default", priority=0, args=[], kwargs={},
                     attempt=1, max_attempts=3, token=token, traceparent="", tracestate="",
                     enqueued_by="", cancel_requested=False, claimed_at=datetime.now(UTC))
    return Run(job=job, spec=None)


def test_others_of_each_gives_each_run_the_other_runs_of_its_job() -> None:
    runs = RunsInFlight()
    older, oldest, elsewhere = _run(1, "a"), _run(1, "b"), _run(2, "c")
    for run in (older, oldest, elsewhere):
        runs.add(run)
    batch = [_run(1, "d"), _run(2, "c"), _run(3, "e"), elsewhere]
    runs.add(batch[0])
    # Job 1's new run sees its two older ones, job 2's new run the one in flight, which sees no
    # other; job 3 has none.
    assert runs.others_of_each(batch) == [[older, oldest], [elsewhere], [], []]
    assert runs.others_of_each([]) == []


def _settled_by_eight_threads() -> Run:
    run = _run(1, "a")
    won: list[bool] = []
    threads = [threading.Thread(target=lambda: won.append(run.start_settling()))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(won) == [False] * 7 + [True]
    return run


# rule 13 (nothing-leaks)
def test_a_run_settles_once_across_threads_and_goes_when_dropped() -> None:
    gone = weakref.ref(_settled_by_eight_threads())
    gc.collect()
    assert gone() is None
