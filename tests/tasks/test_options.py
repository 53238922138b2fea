"""UltJobsTask's options and the rules of defining tasks for UltJobsBackend: no database."""

from __future__ import annotations

import pytest
from django.test.utils import override_settings

from django_ultjobs import job
from django_ultjobs.core.numeric import shown
from django_ultjobs.exceptions import JobConfigurationError
from django_ultjobs.tasks_backend import UltJobsBackend, UltJobsTask, task_class
from django_ultjobs.tasks_backend import task as ultjobs_task
from django_ultjobs.tasks_backend.compat import InvalidTask, task
from django_ultjobs.tasks_backend.runner import TaskRunner
from django_ultjobs.testing import unregister
from tests.tasks import taskdefs
from tests.tasks.settings import TASKS
from tests.tasks.taskdefs import add, capped, email, on_immediate

# -- options carried by @task ----------------------------------------------------------------------


def test_task_options_reach_the_job_spec() -> None:
    assert isinstance(capped, UltJobsTask)
    spec = capped.job_spec()
    assert spec.name == "tests.tasks.taskdefs.capped" == capped.module_path
    assert (spec.concurrency, spec.max_attempts, spec.backoff, spec.max_backoff) == (
        2, 5, 0.5, 10.0)
    assert isinstance(spec.func, TaskRunner) and spec.func.task is capped
    # Queue and priority are Django's; the same scale (higher first) on both sides.
    assert (email.job_spec().queue, email.job_spec().priority) == ("emails", 10)


def test_options_default_from_the_backend() -> None:
    assert add.job_spec().max_attempts == 3 and add.job_spec().concurrency is None
    tasks = {**TASKS, "default": {**TASKS["default"], "OPTIONS": {"MAX_ATTEMPTS": 1}}}
    with override_settings(TASKS=tasks):
        assert add.job_spec().max_attempts == 1
        assert capped.job_spec().max_attempts == 5


@pytest.mark.parametrize("options", [
    {"MAX_ATTEMPTS": 0}, {"MAX_ATTEMPTS": "3"}, {"RETRIES": 3},
    # rule 16 (bad-input-refused): past PostgreSQL's integer, every task's enqueue was refused (its
    # job spec's max_attempts), none at the backend.
    {"MAX_ATTEMPTS": 2**31}, {"MAX_ATTEMPTS": 2**1024}, {"MAX_ATTEMPTS": 10**5000},
    {"MAX_ATTEMPTS": True}, {"MAX_ATTEMPTS": 3.0},
], ids=lambda options: ",".join(f"{k}={shown(v)}" for k, v in options.items()))
def test_bad_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(JobConfigurationError, match="TASKS\\['x'\\]\\['OPTIONS'\\]"):
        UltJobsBackend("x", {"OPTIONS": options})


def test_max_attempts_is_refused_past_its_column_by_name() -> None:
    with pytest.raises(JobConfigurationError) as refused:
        UltJobsBackend("x", {"OPTIONS": {"MAX_ATTEMPTS": 10**5000}})
    assert str(refused.value) == ("TASKS['x']['OPTIONS']['MAX_ATTEMPTS'] must be a whole number "
                                  "from 1 to 2147483647, not an int of 16610 bits")
    assert UltJobsBackend("x", {"OPTIONS": {"MAX_ATTEMPTS": 2**31 - 1}}).max_attempts == 2**31 - 1


@pytest.mark.parametrize("option", [{"concurrency": 0}, {"max_attempts": 0},
                                    {"backoff": -1.0}])
def test_invalid_options_are_invalid_tasks(option: dict[str, object]) -> None:
    with pytest.raises(InvalidTask):
        task(**option)(taskdefs.plain_function)


def test_our_task_decorator_says_when_django_cannot_carry_options(
        monkeypatch: pytest.MonkeyPatch) -> None:
    defined = ultjobs_task(concurrency=3)(taskdefs.plain_function)
    assert isinstance(defined, UltJobsTask) and defined.concurrency == 3
    monkeypatch.setattr(task_class.compat, "TASK_OPTIONS_SUPPORTED", False)
    with pytest.raises(JobConfigurationError,
                       match=r"cannot carry backend options \(concurrency\): Django 6.1 added"):
        ultjobs_task(concurrency=3)(taskdefs.plain_function)
    assert isinstance(ultjobs_task(taskdefs.plain_function), UltJobsTask)


def test_a_job_of_the_same_name_is_refused() -> None:
    name = "tests.tasks.taskdefs.plain_function"

    def other() -> None:
        return None

    unregister(name)  # tests above made tasks of plain_function
    job(name=name)(other)
    try:
        with pytest.raises(InvalidTask, match="two jobs are registered as"):
            task(taskdefs.plain_function)
    finally:
        unregister(name)


def test_a_task_a_worker_could_not_find_is_refused_at_enqueue() -> None:
    with pytest.raises(InvalidTask, match=r"defined for TASKS\['immediate'\], a ImmediateBackend"):
        on_immediate.using(backend="default").enqueue(1)
    renamed = task(taskdefs.plain_function)
    with pytest.raises(InvalidTask, match="not a task defined at module level"):
        renamed.enqueue(1)
