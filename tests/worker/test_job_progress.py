"""Rule 79 (progress-throttled-fenced): ``ctx.set_progress`` is stored on the job, throttled to one
write a second per run (the final ``done == total`` and the last held-back value always written),
fenced on the claim token, and shown by the admin, ``ultjobs list`` and ``progress_of`` for Django
Tasks."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from django_ultjobs import JobOptionError
from django_ultjobs.models import Job
from django_ultjobs.runtime.progress import INTERVAL, JobProgress, progress_text
from tests.conformance.helpers import claim, enqueue, new_job, settlement
from tests.conftest import engine_store, running_worker, tasks_api_missing, wait_until
from tests.testapp.jobs import async_counted, counted

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def recorder(answer: bool = True) -> tuple[list[dict[str, Any]], Any]:
    writes: list[dict[str, Any]] = []

    def write(job_id: int, token: str, value: dict[str, Any]) -> bool:
        writes.append(value)
        return answer

    return writes, write


def test_many_calls_make_one_write_a_second_and_the_final_one_always() -> None:
    writes, write = recorder()
    clock = Clock()
    progress = JobProgress(1, "t", write, clock=clock)
    for done in range(1000):
        progress.set(done, 2000)
    assert [w["done"] for w in writes] == [0]        # the first, then held back
    clock.now += INTERVAL
    progress.set(1000, 2000, "half")
    assert writes[-1] == {"done": 1000, "total": 2000, "message": "half"}
    progress.set(1001, 2000)
    progress.set(2000, 2000, "done")                  # final: written at once
    assert [w["done"] for w in writes] == [0, 1000, 2000]
    progress.flush()                                  # nothing held back after the final one
    assert len(writes) == 3


def test_flush_writes_the_value_held_back() -> None:
    writes, write = recorder()
    progress = JobProgress(1, "t", write, clock=Clock())
    progress.set(1, 10)
    progress.set(7, 10, "seven")
    progress.flush()
    assert writes == [{"done": 1, "total": 10, "message": ""},
                      {"done": 7, "total": 10, "message": "seven"}]


def test_a_fenced_off_write_stops_the_run_writing() -> None:
    writes, write = recorder(answer=False)
    clock = Clock()
    progress = JobProgress(1, "t", write, clock=clock)
    progress.set(1, 10)
    clock.now += 10
    progress.set(10, 10)
    progress.flush()
    assert len(writes) == 1


@pytest.mark.parametrize(("args", "message"), [
    ((-1, 10), "done must be an int of at least 0"),
    ((1.5, 10), "done must be an int"),
    ((True, 10), "done must be an int"),
    ((1, "10"), "total must be an int"),
    ((1, 10, 5), "message must be a string"),
    ((1, 10, "a\x00"), "NUL"),
])
def test_bad_progress_is_refused(args: tuple[Any, ...], message: str) -> None:
    progress = JobProgress(1, "t", recorder()[1])
    with pytest.raises(JobOptionError, match=message):
        progress.set(*args)


def test_the_store_writes_progress_only_under_the_runs_token(alias: str, store: Any) -> None:
    (job_id,) = enqueue(store, new_job())
    (claimed,) = claim(store)
    value = {"done": 3, "total": 9, "message": "m"}
    assert store.save_progress(job_id, str(uuid.uuid4()), value) is False   # a stale run
    assert Job.objects.using(alias).get(id=job_id).progress is None
    assert store.save_progress(job_id, claimed.token, value) is True
    assert Job.objects.using(alias).get(id=job_id).progress == value
    store.settle([settlement(claimed)], "w1")
    assert store.save_progress(job_id, claimed.token, {**value, "done": 9}) is False
    assert Job.objects.using(alias).get(id=job_id).progress == value


def test_a_real_worker_stores_progress_in_few_writes(alias: str, monkeypatch: Any) -> None:
    writes: list[dict[str, Any]] = []
    real = engine_store(alias).save_progress

    def counting(self: Any, job_id: int, token: str, value: dict[str, Any]) -> bool:
        writes.append(value)
        return real(self, job_id, token, value)

    monkeypatch.setattr(engine_store(alias), "save_progress", counting)
    job = counted.enqueue(5000, held_back=3)
    with running_worker(alias):
        wait_until(lambda: Job.objects.using(alias).get(id=job.id).status == "succeeded",
                   message="the job ran")
    # 5,000 + 3 calls: the first, the final, the held-back one (and one a second at most).
    assert 3 <= len(writes) <= 6, writes
    final = {"done": 2, "total": 5001, "message": "again"}
    assert Job.objects.using(alias).get(id=job.id).progress == final


def test_progress_of_reads_a_tasks_stored_progress(alias: str) -> None:
    if (why := tasks_api_missing()) is not None:
        pytest.skip(why)
    from django_ultjobs.tasks_backend import progress_of

    value = {"done": 2, "total": 5001, "message": "again"}
    job = counted.enqueue(1)
    Job.objects.using(alias).filter(id=job.id).update(progress=value)
    assert progress_of(job.id) == value
    assert progress_of("nope") is None


def test_progress_text() -> None:
    assert progress_text(None) == "" and progress_text({"done": "x"}) == ""
    assert progress_text({"done": 1200, "total": 5000, "message": ""}) == "1,200 / 5,000"


def test_an_async_body_sets_progress(alias: str) -> None:
    job = async_counted.enqueue(50)
    with running_worker(alias):
        row = wait_until(lambda: Job.objects.using(alias).filter(
            id=job.id, status__in=["succeeded", "failed"]).first(), message="the job ran")
    assert row.status == "succeeded", row.last_error
    assert row.progress == {"done": 50, "total": 50, "message": "async"}


def test_set_progress_in_an_async_body_says_to_await_aset_progress() -> None:
    import asyncio

    from django_ultjobs.runtime.cancel import CancelScope
    from django_ultjobs.runtime.context import JobContext

    ctx = JobContext(job_id=1, name="x", attempt=1, max_attempts=1, queue="q", worker_id="w",
                     enqueued_by="", scope=CancelScope(),
                     progress=JobProgress(1, "t", recorder()[1]))

    async def body() -> None:
        ctx.set_progress(1, 2)

    with pytest.raises(RuntimeError, match=r"await ctx\.aset_progress"):
        asyncio.run(body())


def test_the_same_value_is_not_written_twice_and_a_failed_write_fails_nothing() -> None:
    from django.db import OperationalError

    writes, write = recorder()
    progress = JobProgress(1, "t", write, clock=Clock())
    for _ in range(3):
        progress.set(10, 10, "done")
    assert len(writes) == 1

    def failing(job_id: int, token: str, value: dict[str, Any]) -> bool:
        raise OperationalError("database is locked")

    progress = JobProgress(1, "t", failing, clock=Clock())
    progress.set(10, 10)  # logged, not raised into the body
