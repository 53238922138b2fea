"""Run hooks (rule 72 (paired-run-hooks)) and the test helpers (rule 74 (run-jobs-real-path)) on a
django.tasks task, whose job the worker only learns of when it claims it (a task's spec, not a
@job)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from django_ultjobs.signals import job_finished, job_started
from django_ultjobs.testing import assert_enqueued, assert_not_enqueued, run_jobs
from tests.conftest import running_worker, wait_until
from tests.tasks.taskdefs import TaskBoom, add, fail


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_hooks_fire_around_a_task_in_a_worker(alias: str) -> None:
    seen: list[tuple[str, str, Any]] = []
    lock = threading.Lock()

    def started(sender: Any, context: Any, **kwargs: Any) -> None:
        with lock:
            seen.append(("started", context.name, None))

    def finished(sender: Any, context: Any, outcome: str, exception: Any, **kw: Any) -> None:
        with lock:
            seen.append((outcome, context.name, exception))

    job_started.connect(started, weak=False)
    job_finished.connect(finished, weak=False)
    try:
        fail.enqueue("broken")
        with running_worker(alias):
            wait_until(lambda: len(seen) == 2, message="both hooks")
    finally:
        job_started.disconnect(started)
        job_finished.disconnect(finished)
    (_, name, _), (outcome, _, exception) = seen
    assert name == fail.module_path and outcome == "failed"
    assert isinstance(exception, TaskBoom)


@pytest.mark.django_db(databases="__all__")
def test_assert_enqueued_and_run_jobs_with_a_task(alias: str) -> None:
    add.enqueue(2, 3)
    assert_enqueued(add, args=[2, 3], count=1)
    (outcome,) = run_jobs()
    assert (outcome.name, outcome.outcome, outcome.result) == (add.module_path, "succeeded", 5)
    assert_not_enqueued(add)
