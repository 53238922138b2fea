"""The Tasks contract: the same assertions against Django's ImmediateBackend and against
UltJobsBackend with a real worker (on SQLite and PostgreSQL), so a divergence from Django's
semantics fails here.

Where Django's backends differ by capability (ImmediateBackend runs inline and keeps no result;
it cannot defer), the test branches on the capability flag, never on the backend's name.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_ultjobs.models import Job
from django_ultjobs.tasks_backend.compat import (
    InvalidTask,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task,
)
from tests.tasks import taskdefs
from tests.tasks.conftest import Harness, SignalLog
from tests.tasks.taskdefs import (
    TaskBoom,
    add,
    async_add,
    context_info,
    fail,
    fail_builtin,
    fail_chained,
    returns_set,
    returns_tuple,
)

READY, RUNNING = TaskResultStatus.READY, TaskResultStatus.RUNNING
SUCCESSFUL, FAILED = TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED


def test_enqueue_returns_a_result_that_finishes_successfully(harness: Harness) -> None:
    result = harness.enqueue(add, 1, 2)

    assert isinstance(result, TaskResult)
    assert isinstance(result.id, str) and result.id
    assert result.task.func is add.func
    assert result.args == [1, 2] and result.kwargs == {}
    assert result.backend == harness.backend_alias
    assert result.enqueued_at is not None
    # Inline execution is the one expected difference: everything else must match.
    assert result.status == (SUCCESSFUL if harness.inline else READY)

    done = harness.finished(result)
    assert done.status == SUCCESSFUL and done.is_finished
    assert done.return_value == 3
    assert done.errors == []
    assert done.attempts == 1 and len(done.worker_ids) == 1
    assert done.enqueued_at <= done.started_at <= done.finished_at
    assert done.last_attempted_at == done.started_at


def test_a_failing_task_is_failed_with_its_exception(harness: Harness) -> None:
    done = harness.finished(harness.enqueue(fail, "boom"))

    assert done.status == FAILED and done.is_finished
    with pytest.raises(ValueError, match="Task failed"):
        done.return_value  # noqa: B018
    (error,) = done.errors
    assert error.exception_class_path == "tests.tasks.taskdefs.TaskBoom"
    assert error.exception_class is TaskBoom
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert 'in fail\n    raise TaskBoom(message)' in error.traceback
    assert error.traceback.rstrip().endswith("tests.tasks.taskdefs.TaskBoom: boom")
    assert done.finished_at is not None and done.attempts == 1


def test_builtin_and_chained_exceptions_keep_their_class(harness: Harness) -> None:
    builtin = harness.finished(harness.enqueue(fail_builtin))
    chained = harness.finished(harness.enqueue(fail_chained))

    assert builtin.errors[0].exception_class_path == "builtins.ValueError"
    assert builtin.errors[0].exception_class is ValueError
    # The chain's cause is in the traceback; the class is the exception that ended the run.
    assert chained.errors[0].exception_class_path == "tests.tasks.taskdefs.TaskBoom"
    assert "KeyError: 'missing'" in chained.errors[0].traceback


def test_return_values_are_normalised_as_json(harness: Harness) -> None:
    as_list = harness.finished(harness.enqueue(returns_tuple))
    not_json = harness.finished(harness.enqueue(returns_set))

    assert as_list.status == SUCCESSFUL and as_list.return_value == [1, 2]
    assert not_json.status == FAILED
    assert not_json.errors[0].exception_class_path == "builtins.TypeError"


def test_arguments_must_be_json(harness: Harness) -> None:
    with pytest.raises(TypeError):
        harness.enqueue(add, object(), 1)
    if harness.database is not None:
        assert not Job.objects.using(harness.database).exists()  # nothing written


def test_get_result_by_id(harness: Harness) -> None:
    result = harness.enqueue(add, 2, 2)
    backend = harness.backend

    if not backend.supports_get_result:
        with pytest.raises(NotImplementedError):
            backend.get_result(result.id)
        return
    fetched = harness.task(add).get_result(result.id)
    assert fetched.id == result.id and fetched.task.func is add.func
    assert fetched.args == [2, 2] and fetched.backend == harness.backend_alias
    done = harness.finished(result)
    result.refresh()
    assert result.status == SUCCESSFUL and result.return_value == 4
    assert result.worker_ids == done.worker_ids and result.finished_at == done.finished_at
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("999999999")
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("not-an-id")


def test_priority_and_queue_are_validated(harness: Harness) -> None:
    for priority in (101, -101, 1.5):
        with pytest.raises(InvalidTask, match="priority must be a whole number"):
            harness.task(add, priority=priority)
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid for backend"):
        harness.task(add, queue_name="nope")
    assert harness.task(add, priority=-100).priority == -100
    assert harness.task(add, priority=100, queue_name="emails").queue_name == "emails"


def test_invalid_task_definitions(harness: Harness) -> None:
    with pytest.raises(InvalidTask, match="first argument of 'context'"):
        task(backend=harness.backend_alias, takes_context=True)(taskdefs.no_context_param)

    def local(x: int) -> int:
        return x

    with pytest.raises(InvalidTask, match="module level"):
        task(backend=harness.backend_alias)(local)


def test_run_after(harness: Harness) -> None:
    run_after = timezone.now() + timedelta(seconds=1)
    if not harness.backend.supports_defer:
        with pytest.raises(InvalidTask, match="run_after"):
            harness.task(add, run_after=run_after)
        return
    with pytest.raises(InvalidTask, match="aware"):
        harness.task(add, run_after=run_after.replace(tzinfo=None))
    result = harness.task(add, run_after=run_after).enqueue(1, 1)
    assert result.task.run_after == run_after
    done = harness.finished(result)
    assert done.return_value == 2
    assert done.started_at >= run_after


def test_takes_context(harness: Harness) -> None:
    done = harness.finished(harness.enqueue(context_info, 5))

    seen = done.return_value
    assert seen["is_task_context"] is True
    assert seen["attempt"] == 1
    assert seen["id"] == done.id
    assert seen["status"] == RUNNING
    assert seen["worker_ids"] == done.worker_ids
    assert seen["x"] == 5


def test_async_task(harness: Harness) -> None:
    assert harness.backend.supports_async_task
    assert harness.finished(harness.enqueue(async_add, 2, 3)).return_value == 5


def test_signals_on_success(harness: Harness, signals: SignalLog) -> None:
    done = harness.finished(harness.enqueue(add, 1, 2))

    sent = signals.of(done.id)
    assert [s.signal for s in sent] == ["enqueued", "started", "finished"]
    assert {s.sender for s in sent} == {type(harness.backend)}
    enqueued, started, finished = sent
    assert enqueued.status == READY and enqueued.worker_ids == ()
    assert started.status == RUNNING and started.worker_ids == tuple(done.worker_ids)
    assert finished.status == SUCCESSFUL and finished.errors == 0
    assert finished.result.return_value == 3
    assert finished.result.finished_at is not None
    assert finished.exc_type is None


def test_signals_on_failure(harness: Harness, signals: SignalLog) -> None:
    done = harness.finished(harness.enqueue(fail, "boom"))

    sent = signals.of(done.id)
    assert [s.signal for s in sent] == ["enqueued", "started", "finished"]
    finished = sent[-1]
    assert finished.status == FAILED and finished.errors == 1
    # Sent from inside the exception handler: receivers (Django's logger) see the exception.
    assert finished.exc_type is TaskBoom
    assert finished.result.errors[0].exception_class_path == "tests.tasks.taskdefs.TaskBoom"
