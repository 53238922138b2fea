"""TaskResults read back from job rows: status mapping, attempts, errors. No worker needed."""

from __future__ import annotations

import traceback
from datetime import UTC, datetime, timedelta

import pytest

from django_ultjobs.models import Job
from django_ultjobs.tasks_backend.compat import TaskResultStatus
from django_ultjobs.tasks_backend.results import (
    Attempt,
    exception_class_path,
    from_job,
    history,
    task_error,
)
from tests.tasks.taskdefs import TaskBoom, add

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def formatted(exc: BaseException) -> str:
    try:
        raise exc
    except BaseException as raised:
        return "".join(traceback.format_exception(raised))


def chained() -> str:
    try:
        try:
            {}["k"]
        except KeyError as exc:
            raise TaskBoom("second") from exc
    except TaskBoom as exc:
        return "".join(traceback.format_exception(exc))
    raise AssertionError("unreachable")


def with_note() -> str:
    exc = ValueError("v")
    exc.add_note("Note: a note that looks like a type")
    return formatted(exc)


@pytest.mark.parametrize("text, path", [
    (formatted(ValueError("x")), "builtins.ValueError"),
    (formatted(TaskBoom("multi\nline: message")), "tests.tasks.taskdefs.TaskBoom"),
    (formatted(KeyboardInterrupt()), "builtins.KeyboardInterrupt"),
    (chained(), "tests.tasks.taskdefs.TaskBoom"),
    (with_note(), "builtins.ValueError"),
    (formatted(ExceptionGroup("eg", [ValueError("a"), TaskBoom("b")])), "builtins.ExceptionGroup"),
    (formatted(SyntaxError("bad", ("f.py", 1, 2, "x y", 1, 3))), "builtins.SyntaxError"),
    ("cancelled on request before this attempt started", None),
    ("lease lapsed: worker h:1:a stopped heartbeating", None),
    ("", None),
])
def test_exception_class_path_is_read_from_the_traceback(text: str, path: str | None) -> None:
    assert exception_class_path(text) == path


def test_messages_that_are_not_tracebacks_name_their_cause() -> None:
    assert task_error("cancelled", "cancelled on request").exception_class_path == (
        "django_ultjobs.exceptions.CancelRequestedError")
    assert task_error("lease_lost", "lease lapsed: ...").exception_class_path == (
        "django_ultjobs.exceptions.LeaseLostError")
    assert task_error("failed", "gave up after 3 attempts").exception_class_path == (
        "django_ultjobs.exceptions.UltJobsError")
    error = task_error("retrying", formatted(TaskBoom("x")))
    assert error.exception_class is TaskBoom


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_history_counts_one_worker_per_attempt() -> None:
    rows = [
        Attempt(1, "w1", at(1), "slot_lost", "lost fleet slot"),   # handed back: not counted
        Attempt(1, "w2", at(2), "retrying", formatted(TaskBoom("one"))),
        Attempt(2, "w3", at(3), "lease_lost", "lease lapsed: worker w3 ..."),
        Attempt(3, "w4", at(4), "interrupted", "the worker stopped"),  # attempt handed back
    ]
    done = history(rows, counted=2)
    assert done.worker_ids == ["w2", "w3"]
    assert [e.exception_class_path for e in done.errors] == [
        "tests.tasks.taskdefs.TaskBoom", "django_ultjobs.exceptions.LeaseLostError"]
    assert (done.started_at, done.last_attempted_at) == (at(2), at(3))

    running = history(rows, counted=3, current=Attempt(3, "w5", at(5), "", ""))
    assert running.worker_ids == ["w2", "w3", "w5"]
    assert running.last_attempted_at == at(5)


def job_row(status: str, **fields: object) -> Job:
    defaults: dict[str, object] = {
        "id": 7, "name": add.module_path, "queue": "default", "priority": 0, "args": [1, 2],
        "kwargs": {}, "attempt": 1, "worker_id": "w1", "claimed_at": at(1),
        "created_at": at(0), "finished_at": at(2), "result": None, "last_error": "",
    }
    defaults.update(fields)
    return Job(status=status, **defaults)


@pytest.mark.parametrize("status, expected", [
    ("queued", TaskResultStatus.READY),
    ("running", TaskResultStatus.RUNNING),
    ("waiting", TaskResultStatus.RUNNING),
    ("succeeded", TaskResultStatus.SUCCESSFUL),
    ("failed", TaskResultStatus.FAILED),
    ("cancelled", TaskResultStatus.FAILED),
])
def test_status_mapping(status: str, expected: str) -> None:
    attempts = [] if status in {"queued", "running"} else [
        Attempt(1, "w1", at(1), {"succeeded": "succeeded", "waiting": "suspended",
                                 "failed": "failed", "cancelled": "cancelled"}[status],
                formatted(TaskBoom("x")) if status == "failed" else "cancelled on request")]
    attempt = 0 if status == "queued" else 1
    result = from_job(job_row(status, attempt=attempt, result=3), attempts, task=add,
                      backend="default")
    assert result.status == expected
    assert result.id == "7" and result.args == [1, 2] and result.enqueued_at == at(0)
    assert result.is_finished == (expected in {"SUCCESSFUL", "FAILED"})
    assert (result.finished_at is not None) == result.is_finished
    if expected == TaskResultStatus.SUCCESSFUL:
        assert result.return_value == 3
    if status == "cancelled":
        assert result.errors[-1].exception_class_path == (
            "django_ultjobs.exceptions.CancelRequestedError")
    if status == "queued":
        assert (result.worker_ids, result.started_at, result.errors) == ([], None, [])
    if status == "running":
        assert result.worker_ids == ["w1"] and result.started_at == at(1)


def test_cancelled_before_it_ran_still_shows_why() -> None:
    result = from_job(job_row("cancelled", attempt=0, last_error="cancelled by alice"), [],
                      task=add, backend="default")
    (error,) = result.errors
    assert error.exception_class_path == "django_ultjobs.exceptions.CancelRequestedError"
    assert error.traceback == "cancelled by alice"
    assert result.worker_ids == [] and result.attempts == 0
