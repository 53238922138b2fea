"""The claim loop's batch lookups of ``RunsInFlight`` (performance.md, item 82) answer as the
one-run ones do; a slotted ``Run`` still settles once and can be watched going (rule 13)."""

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


def test_others_of_each_answers_as_others_of_for_every_run() -> None:
    runs = RunsInFlight()
    older, oldest, elsewhere = _run(1, "a"), _run(1, "b"), _run(2, "c")
    for run in (older, oldest, elsewhere):
        runs.add(run)
    batch = [_run(1, "d"), _run(2, "c"), _run(3, "e"), elsewhere]
    runs.add(batch[0])
    assert runs.others_of_each(batch) == [runs.others_of(run) for run in batch]
    assert runs.others_of_each(batch)[0] == [older, oldest]
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


def test_a_run_settles_once_across_threads_and_goes_when_dropped() -> None:  # rule 13
    gone = weakref.ref(_settled_by_eight_threads())
    gc.collect()
    assert gone() is None
