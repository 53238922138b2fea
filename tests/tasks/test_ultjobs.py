"""What UltJobsBackend adds to the contract, with a real worker: retries, slots, durable
steps, transactions, and workers that find tasks by their module path."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.test.utils import override_settings

from django_ultjobs import UnknownJobError
from django_ultjobs.core.slot_keys import slot_key_for
from django_ultjobs.jobs.registry import get_job
from django_ultjobs.models import Job, JobAttempt
from django_ultjobs.store.attempts import history
from django_ultjobs.tasks_backend import UltJobsBackend
from django_ultjobs.tasks_backend.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
)
from django_ultjobs.tasks_backend.runner import TaskRunner
from django_ultjobs.testing import unregister
from tests.conftest import REPO, running_worker, wait_until, worker_env
from tests.tasks import taskdefs
from tests.tasks.conftest import SignalLog
from tests.tasks.settings import JOB_MODULES
from tests.tasks.taskdefs import (
    add,
    async_where,
    capped,
    context_info,
    doubled,
    email,
    flaky,
    one_at_a_time,
    stepped,
)

SUCCESSFUL, FAILED = TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED


def finished(result_id: str, timeout: float = 20.0) -> object:
    backend = task_backends["default"]
    return wait_until(lambda: (r := backend.get_result(result_id)).is_finished and r,
                      timeout=timeout, message=f"task {result_id} to finish")


@pytest.fixture
def backend() -> UltJobsBackend:
    return task_backends["default"]


# -- retries and attempts -------------------------------------------------------------------------


def test_a_first_attempt_held_by_the_jobs_row_reads_as_one_attempt(alias: str) -> None:
    # rule 97 (attempt-on-row): the settle wrote no attempt row; the TaskResult reads the attempt
    # from the row.
    result = add.enqueue(2, 3)
    with running_worker(alias):
        done = finished(result.id)
    job = Job.objects.using(alias).get(pk=result.id)
    assert job.attempt_on_row and not JobAttempt.objects.using(alias).filter(job=job).exists()
    assert done.attempts == 1 and done.worker_ids == [job.worker_id] and done.errors == []
    assert done.started_at == done.last_attempted_at == job.claimed_at
    assert done.finished_at == job.finished_at and done.return_value == 5


def test_a_first_attempt_in_a_per_job_slot_is_held_by_the_jobs_row(alias: str) -> None:
    # rule 97 (attempt-on-row): a run of a capped task (@task(concurrency=2)) held one of its fleet
    # slots; the row keeps the slot's number, and the attempt reads its key and slot as a row would.
    result = capped.enqueue()
    with running_worker(alias):
        finished(result.id)
    job = Job.objects.using(alias).get(pk=result.id)
    assert job.attempt_on_row and not JobAttempt.objects.using(alias).filter(job=job).exists()
    (attempt,) = history(job.id, using=alias)
    assert job.attempt_slot in (0, 1)
    assert (attempt.worker_id, attempt.slot_key, attempt.slot) == (
        job.worker_id, slot_key_for(job.name), job.attempt_slot)


@pytest.mark.parametrize("fail_times, status, errors", [(2, SUCCESSFUL, 2), (5, FAILED, 3)])
def test_retries_up_to_max_attempts(alias: str, signals: SignalLog, fail_times: int,
                                    status: str, errors: int) -> None:
    result = flaky.enqueue(fail_times)
    with running_worker(alias):
        done = finished(result.id)

    assert done.status == status
    assert done.attempts == 3 and len(done.worker_ids) == 3
    assert len(done.errors) == errors
    assert {e.exception_class_path for e in done.errors} == {"tests.tasks.taskdefs.TaskBoom"}
    assert "failure on attempt 1" in done.errors[0].traceback
    if status == SUCCESSFUL:
        assert done.return_value == 3
    # One task_started per attempt, one task_finished for the task.
    assert signals.names(result.id) == ["enqueued", "started", "started", "started",
                                        "finished"]
    started = [s for s in signals.of(result.id) if s.signal == "started"]
    assert [len(s.worker_ids) for s in started] == [1, 2, 3]
    assert [s.errors for s in started] == [0, 1, 2]
    assert done.started_at < done.last_attempted_at <= done.finished_at


def test_concurrency_caps_runs_across_the_worker(alias: str) -> None:
    # rule 5 (fleet-cap): the cap holds for a task the worker only learns of when it claims it.
    unregister(one_at_a_time.module_path)
    taskdefs.Overlap.peak = 0
    results = [one_at_a_time.enqueue(0.15) for _ in range(3)]
    with running_worker(alias, threads=4):
        done = [finished(r.id) for r in results]
    assert [d.status for d in done] == [SUCCESSFUL] * 3
    assert taskdefs.Overlap.peak == 1
    assert get_job(one_at_a_time.module_path).concurrency == 1


def test_context_carries_the_job_context(alias: str) -> None:
    result = context_info.enqueue(7)
    with running_worker(alias):
        done = finished(result.id)
    assert done.return_value["job_id"] == int(result.id)


def test_durable_steps_through_the_context(alias: str) -> None:
    taskdefs.Calls.count = 0
    result = stepped.enqueue()
    with running_worker(alias):
        done = finished(result.id)
    assert (done.status, done.return_value, done.attempts) == (SUCCESSFUL, 1, 2)
    assert taskdefs.Calls.count == 1


def test_priority_orders_the_queue(alias: str) -> None:
    low = add.using(priority=-5).enqueue(1, 1)
    high = add.using(priority=50).enqueue(2, 2)
    with running_worker(alias, threads=1):
        low_done, high_done = finished(low.id), finished(high.id)
    assert high_done.started_at <= low_done.started_at


def test_cancel_request_fails_the_task_with_a_cancellation(alias: str) -> None:
    result = add.enqueue(1, 2)
    Job.objects.using(alias).filter(pk=result.id).update(cancel_requested=True)
    with running_worker(alias):
        done = finished(result.id)
    assert done.status == FAILED
    assert done.errors[-1].exception_class_path == (
        "django_ultjobs.exceptions.CancelRequestedError")
    assert "cancelled on request" in done.errors[-1].traceback


# -- transactions, lookups, async ------------------------------------------------------------------


def test_enqueue_in_a_rolled_back_transaction_leaves_no_job(alias: str, backend) -> None:
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        result = add.enqueue(1, 2)
        assert Job.objects.using(alias).filter(pk=result.id).exists()
        raise RuntimeError("roll back")
    assert not Job.objects.using(alias).filter(pk=result.id).exists()
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(result.id)


def test_get_result_of_a_plain_job_does_not_exist(alias: str, backend) -> None:
    from tests.testapp.jobs import add as plain_add

    row = plain_add.enqueue(1, 2)
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(str(row.id))


def test_async_enqueue_and_get_result(alias: str, backend) -> None:
    result = async_to_sync(add.aenqueue)(3, 4)
    fetched = async_to_sync(add.aget_result)(result.id)
    assert fetched.id == result.id and fetched.status == TaskResultStatus.READY
    assert Job.objects.using(alias).get(pk=result.id).args == [3, 4]


# -- workers find tasks by their module path -------------------------------------------------------


def test_a_plain_django_task_runs(alias: str) -> None:
    # A Task built without UltJobsTask (Django 6.0's @task): defaults apply, the worker runs it.
    assert type(doubled).__name__ == "Task"
    result = doubled.enqueue(21)  # validated, so registered (a worker's import does the same)
    assert get_job(doubled.module_path).max_attempts == 3
    with running_worker(alias):
        assert finished(result.id).return_value == 42


def test_worker_imports_a_task_nobody_registered(alias: str) -> None:
    result = add.enqueue(5, 6)
    unregister(add.module_path)
    with running_worker(alias):
        assert finished(result.id).return_value == 11
    assert isinstance(get_job(add.module_path).func, TaskRunner)


@pytest.mark.parametrize("registered", [True, False])
def test_an_async_task_runs_on_the_workers_event_loop(alias: str, signals: SignalLog,
                                                      registered: bool) -> None:
    # rule 85 (one-event-loop): awaited on the lane's loop (not run to completion on a thread of the
    # pool), its signals sent as for a sync task; also when the worker first meets it at its claim.
    ok, failing = async_where.enqueue(), async_where.enqueue(fail=True)
    if not registered:
        unregister(async_where.module_path)
    with running_worker(alias, threads=1):
        assert finished(ok.id).return_value == "ultjobs-async"
        done = finished(failing.id)
    assert get_job(async_where.module_path).is_coroutine
    assert done.status == FAILED
    # Retried by its policy (3 attempts), as a sync task is.
    assert {e.exception_class_path for e in done.errors} == {"tests.tasks.taskdefs.TaskBoom"}
    assert done.attempts == 3
    assert signals.names(ok.id) == ["enqueued", "started", "finished"]
    # task_finished of a failure is sent inside a handler of the exception, as Django's are.
    [failed] = [s for s in signals.of(failing.id) if s.signal == "finished"]
    assert failed.status == FAILED and failed.exc_type is taskdefs.TaskBoom


def test_a_path_that_is_not_a_task_is_parked_not_run(alias: str) -> None:
    # A plain function at the path: nothing offers a job spec, so rule 12 (unknown-job-parked) parks
    # the job.
    unregister("tests.tasks.taskdefs.plain_function")  # tests above made tasks of it
    good = add.enqueue(1, 1)
    Job.objects.using(alias).filter(pk=good.id).update(
        name="tests.tasks.taskdefs.plain_function")
    with running_worker(alias):
        wait_until(lambda: JobAttempt.objects.using(alias).filter(
            job_id=good.id, outcome="suspended").exists(), message="the job parked")
    assert get_job("tests.tasks.taskdefs.plain_function") is None


def test_the_result_of_a_task_whose_code_is_gone(alias: str, backend: UltJobsBackend) -> None:
    # rule 12 (unknown-job-parked): a task removed (or renamed) while runs of it were queued still
    # has a result: READY while it is parked, FAILED once UNKNOWN_JOB_TIMEOUT gives up on it, saying
    # why.
    removed = "tests.tasks.taskdefs.removed_in_the_last_deploy"
    result = add.using(priority=7).enqueue(1, 2)
    Job.objects.using(alias).filter(pk=result.id).update(name=removed)
    queued = backend.get_result(result.id)
    assert (queued.status, queued.args, queued.task.module_path) == ("READY", [1, 2], removed)
    assert (queued.task.priority, queued.task.queue_name) == (7, "default")
    with pytest.raises(UnknownJobError, match=removed):
        queued.task.call()
    assert get_job(removed) is None  # reading the result registered nothing
    short = {"DATABASE": alias, "JOB_MODULES": JOB_MODULES, "UNKNOWN_JOB_DELAY": 0.05,
             "UNKNOWN_JOB_TIMEOUT": 0.5}
    with override_settings(ULTJOBS=short), running_worker(alias):
        failed = finished(result.id)
    assert failed.status == FAILED
    assert failed.errors[-1].traceback.startswith(f'no worker knows job "{removed}"')


def test_a_task_outside_the_apps_and_job_modules_is_refused_at_enqueue(alias: str) -> None:
    # rule 40 (project-imports-only): a worker would not import its module, so it could never run.
    with override_settings(ULTJOBS={"DATABASE": alias}), \
            pytest.raises(InvalidTask, match=r"ULTJOBS\['JOB_MODULES'\]"):
        add.enqueue(1, 2)
    assert not Job.objects.using(alias).exists()


@pytest.fixture
def pg_tasks() -> Iterator[str]:
    with override_settings(ULTJOBS={"DATABASE": "postgres", "JOB_MODULES": JOB_MODULES}):
        yield "postgres"


@pytest.mark.django_db(transaction=True, databases=["postgres"])
def test_a_runjobworker_process_runs_tasks_by_path(pg_tasks: str) -> None:
    """A real worker process: no registration beyond the TASKS setting (rule 12 (unknown-job-parked)
    never fires)."""
    results = [add.enqueue(20, 22), context_info.enqueue(1), email.enqueue("a@example.com"),
               doubled.enqueue(4)]
    env = {**worker_env(pg_tasks), "DJANGO_SETTINGS_MODULE": "tests.tasks.settings"}
    proc = subprocess.run(
        [sys.executable, "-m", "django", "runjobworker", "--burst", "--database", pg_tasks,
         "--queue", "default", "--queue", "emails"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    done = [finished(r.id, timeout=5) for r in results]
    assert [d.status for d in done] == [SUCCESSFUL] * 4
    assert done[0].return_value == 42
    assert done[1].return_value["attempt"] == 1
    assert done[2].return_value == "sent to a@example.com"
    assert done[3].return_value == 8  # a plain Task: registered by the import itself
    assert str(os.getpid()) not in done[0].worker_ids[0].split(":")


def test_an_expired_task_fails_with_its_expiry_and_no_attempt(alias: str) -> None:
    """rule 58 (expired-never-runs): a task whose job expired before any worker started it: FAILED,
    never run, its error a ``JobExpiredError`` saying when it expired, no attempt counted."""
    from django.utils import timezone

    result = add.enqueue(1, 2)
    Job.objects.using(alias).filter(pk=result.id).update(
        expires_at=timezone.now() - timezone.timedelta(seconds=1))
    with running_worker(alias):
        done = finished(result.id)
    assert done.status == FAILED
    assert done.attempts == 0 and done.worker_ids == []
    (error,) = done.errors
    assert error.exception_class_path == "django_ultjobs.exceptions.JobExpiredError"
    assert error.traceback.startswith("expired: not started by ")
    assert list(JobAttempt.objects.using(alias).filter(job_id=result.id)
                .values_list("attempt", "outcome")) == [(1, "expired")]


def test_task_timeout_and_retry_on_hold_through_django_tasks(alias: str,
                                                             signals: SignalLog) -> None:
    """rules 55 (timeout-cancels), 57 (retry-on-only): ``@task(timeout=...)`` and
    ``@task(retry_on=...)`` reach the job: the timed-out task is FAILED with a JobTimeoutError, the
    ValueError is not retried, the ConnectionError is, to its last attempt; each sends task_finished
    once, FAILED."""
    slow = taskdefs.overstays.enqueue(30.0)
    bug = taskdefs.retried_on_connection.enqueue("value")
    flaky_call = taskdefs.retried_on_connection.enqueue("connection")
    with running_worker(alias, heartbeat_interval=0.2):
        slow_done, bug_done, flaky_done = (finished(slow.id), finished(bug.id),
                                           finished(flaky_call.id))
    assert slow_done.status == FAILED
    assert slow_done.errors[-1].exception_class_path == (
        "django_ultjobs.exceptions.JobTimeoutError")
    assert (bug_done.status, bug_done.attempts) == (FAILED, 1)
    assert bug_done.errors[-1].exception_class_path == "builtins.ValueError"
    assert (flaky_done.status, flaky_done.attempts) == (FAILED, 3)
    assert [o for (o,) in JobAttempt.objects.using(alias).filter(job_id=bug.id)
            .values_list("outcome")] == ["not_retried"]
    for result_id in (slow.id, bug.id, flaky_call.id):
        assert [s.status for s in signals.of(result_id) if s.signal == "finished"] == [
            str(FAILED)]
