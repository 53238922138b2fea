"""Unique tasks through ``django.tasks`` (rules 65 (one-key-holder), 66 (held-key-returns-holder)):
``enqueue()`` of a task whose arguments a run already holds returns that run's result."""

from __future__ import annotations

from django.db import transaction

from django_ultjobs.models import Job
from django_ultjobs.tasks_backend import UltJobsTask
from django_ultjobs.tasks_backend.compat import TaskResultStatus, task_backends
from tests.conftest import running_worker, wait_until
from tests.tasks.conftest import SignalLog
from tests.tasks.taskdefs import refresh


def test_the_option_reaches_the_job_spec() -> None:
    assert isinstance(refresh, UltJobsTask)
    spec = refresh.job_spec()
    assert spec.unique is True and spec.unique_for == 0.0


def test_enqueue_of_a_held_task_returns_the_holders_result(alias: str,
                                                           signals: SignalLog) -> None:
    first = refresh.enqueue(7)
    # The task's own parameters key the call: refresh(7) is refresh(user_id=7, full=False).
    again = refresh.enqueue(user_id=7, full=False)
    other = refresh.enqueue(7, full=True)
    assert again.id == first.id and other.id != first.id
    assert again.status == TaskResultStatus.READY
    assert again.args == [7] and again.kwargs == {}  # the holder's, as get_result reads them
    assert again.task.module_path == refresh.module_path
    # Nothing was enqueued the second time: no task_enqueued for it.
    assert signals.names(first.id) == ["enqueued"]
    assert Job.objects.using(alias).count() == 2


def test_a_finished_task_lets_the_next_enqueue_queue_a_new_run(alias: str) -> None:
    first = refresh.enqueue(8)
    backend = task_backends["default"]
    with running_worker(alias):
        wait_until(lambda: backend.get_result(first.id).is_finished, timeout=20,
                   message="the task to finish")
    held = backend.get_result(first.id)
    assert held.status == TaskResultStatus.SUCCESSFUL and held.return_value == 8
    second = refresh.enqueue(8)
    assert second.id != first.id and second.status == TaskResultStatus.READY


def test_inside_a_transaction_the_duplicate_is_the_transactions_own_row(alias: str) -> None:
    with transaction.atomic(using=alias):
        first = refresh.enqueue(9)
        assert refresh.enqueue(9).id == first.id
    assert Job.objects.using(alias).filter(name=refresh.module_path).count() == 1
