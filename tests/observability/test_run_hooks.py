"""Run hooks (rule 72 (paired-run-hooks)): ``job_started`` and ``job_finished`` around every run, in
its thread.

A real Worker on both engines; each test connects receivers for its own jobs only (sender=)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from django_ultjobs import job
from django_ultjobs.models import Job, JobStatus
from django_ultjobs.operations import cancel_jobs
from django_ultjobs.runtime.context import JobContext
from django_ultjobs.signals import job_finished, job_started
from tests.conftest import events, running_worker, wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@job(name="hooks_ok", max_attempts=1)
def hooks_ok(a: int, b: int = 0) -> int:
    return a + b


@job(name="hooks_flaky", takes_context=True, max_attempts=2, backoff=0.0)
def hooks_flaky(ctx: JobContext) -> str:
    if ctx.attempt == 1:
        raise ValueError("first attempt fails")
    return "ok"


@job(name="hooks_wait_cancel", takes_context=True, max_attempts=1)
def hooks_wait_cancel(ctx: JobContext) -> None:
    while True:
        ctx.raise_if_cancelled()
        time.sleep(0.01)


class Recorder:
    """What the receivers saw, and in which thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def started(self, sender: Any, **kwargs: Any) -> None:
        with self.lock:
            self.calls.append(("started", {**kwargs, "sender": sender,
                                           "thread": threading.get_ident()}))

    def finished(self, sender: Any, **kwargs: Any) -> None:
        with self.lock:
            self.calls.append(("finished", {**kwargs, "sender": sender,
                                            "thread": threading.get_ident()}))

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [c for k, c in self.calls if k == kind]


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    senders = (hooks_ok, hooks_flaky, hooks_wait_cancel)
    for sender in senders:
        job_started.connect(rec.started, sender=sender, weak=False)
        job_finished.connect(rec.finished, sender=sender, weak=False)
    yield rec
    for sender in senders:
        job_started.disconnect(rec.started, sender=sender)
        job_finished.disconnect(rec.finished, sender=sender)


def test_started_and_finished_in_the_run_thread_with_the_outcome(alias, recorder):
    """Rule 72 (paired-run-hooks): one job_started and one job_finished per run, in the thread that
    ran the body, sender the job, with its arguments, the outcome and no exception on success."""
    row = hooks_ok.enqueue(2, b=3)
    with running_worker(alias):
        wait_until(lambda: recorder.of("finished"), message="job_finished")
    (started,), (finished,) = recorder.of("started"), recorder.of("finished")
    assert started["sender"] is hooks_ok and finished["sender"] is hooks_ok
    assert started["context"].job_id == row.id and started["args"] == [2]
    assert started["kwargs"] == {"b": 3}
    assert finished["outcome"] == "succeeded" and finished["exception"] is None
    assert finished["duration"] >= 0
    assert started["thread"] == finished["thread"] != threading.get_ident()


def test_failure_and_retry_carry_the_exception(alias, recorder):
    """Rule 72 (paired-run-hooks): a failed attempt that will be retried says ``retrying`` with the
    exception; the next attempt ``succeeded``."""
    hooks_flaky.enqueue()
    with running_worker(alias):
        wait_until(lambda: len(recorder.of("finished")) == 2, message="two attempts")
    first, second = recorder.of("finished")
    assert first["outcome"] == "retrying"
    assert isinstance(first["exception"], ValueError)
    assert second["outcome"] == "succeeded" and second["exception"] is None
    assert [c["context"].attempt for c in recorder.of("started")] == [1, 2]


def test_cancel_is_finished_as_cancelled(alias, recorder):
    """Rule 72 (paired-run-hooks): a run cancelled on request ends with ``cancelled``."""
    row = hooks_wait_cancel.enqueue()
    with running_worker(alias):
        wait_until(lambda: recorder.of("started"), message="job_started")
        cancel_jobs([row.id], using=alias)
        wait_until(lambda: recorder.of("finished"), message="job_finished")
    (finished,) = recorder.of("finished")
    assert finished["outcome"] == "cancelled"
    assert finished["exception"] is not None
    assert Job.objects.using(alias).get(pk=row.id).status == JobStatus.CANCELLED


def test_a_failing_started_receiver_fails_the_attempt(alias, recorder):
    """Rule 72 (paired-run-hooks): a context that could not be set up does not run the body: the
    attempt fails like the body's error, and job_finished still tears down what was set up."""

    def broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("tenant not found")

    job_started.connect(broken, sender=hooks_ok, weak=False)
    try:
        row = hooks_ok.enqueue(1)
        with running_worker(alias):
            wait_until(lambda: recorder.of("finished"), message="job_finished")
            wait_until(lambda: Job.objects.using(alias).get(pk=row.id).status
                       == JobStatus.FAILED, message="failed")
    finally:
        job_started.disconnect(broken, sender=hooks_ok)
    (finished,) = recorder.of("finished")
    assert finished["outcome"] == "failed"
    assert "tenant not found" in str(finished["exception"])
    assert "tenant not found" in Job.objects.using(alias).get(pk=row.id).last_error


def test_a_failing_finished_receiver_changes_nothing(alias, recorder, caplog):
    """Rule 72 (paired-run-hooks): a teardown that raises is logged; the outcome stands."""

    def broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("teardown broke")

    job_finished.connect(broken, sender=hooks_ok, weak=False)
    try:
        row = hooks_ok.enqueue(1)
        with running_worker(alias):
            wait_until(lambda: Job.objects.using(alias).get(pk=row.id).status
                       == JobStatus.SUCCEEDED, message="succeeded")
    finally:
        job_finished.disconnect(broken, sender=hooks_ok)
    (logged,) = events(caplog, "jobs.worker.hook-failed", job_id=row.id)
    assert "teardown broke" in logged["error"]
    assert recorder.of("finished")[0]["outcome"] == "succeeded"


_HOOKED: contextvars.ContextVar[str] = contextvars.ContextVar("hooked", default="")


@job(name="hooks_async", max_attempts=1)
async def hooks_async() -> str:
    await asyncio.sleep(0)
    return f"{_HOOKED.get()}@{threading.current_thread().name}"


def test_an_async_run_is_bracketed_with_its_context_reaching_the_body(alias):
    """Rules 72 (paired-run-hooks) and 85 (one-event-loop): an async run's hooks are sent from a
    thread (their receivers may use the ORM); what job_started puts in a context variable reaches
    the body on the loop."""
    seen: list[tuple[str, Any]] = []

    def started(sender: Any, **kwargs: Any) -> None:
        Job.objects.using(alias).filter(pk=kwargs["context"].job_id).exists()  # the ORM works
        _HOOKED.set("set-by-hook")
        seen.append(("started", threading.current_thread().name))

    def finished(sender: Any, **kwargs: Any) -> None:
        seen.append(("finished", kwargs["outcome"]))

    job_started.connect(started, sender=hooks_async, weak=False)
    job_finished.connect(finished, sender=hooks_async, weak=False)
    try:
        row = hooks_async.enqueue()
        with running_worker(alias):
            done = wait_until(lambda: Job.objects.using(alias).filter(
                pk=row.id, status=JobStatus.SUCCEEDED).first(), message="the async job")
    finally:
        job_started.disconnect(started, sender=hooks_async)
        job_finished.disconnect(finished, sender=hooks_async)
    assert done.result == "set-by-hook@ultjobs-async"
    assert [kind for kind, _ in seen] == ["started", "finished"]
    assert seen[0][1] != "ultjobs-async" and seen[1][1] == "succeeded"
