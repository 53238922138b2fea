"""Retrying a unique job whose key a later enqueue took over, on both engines
(rule 107 (retry-takes-key-back)): the key comes back when an enqueue could take it, the retry is
refused naming the holder when another job holds it, and runs without it only when asked; a holder
committed while the retry waits is never missed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.db.models.functions import Now
from django.utils import timezone

from django_ultjobs.jobs.unique import KeyHeld
from django_ultjobs.models import Job
from django_ultjobs.operations import retry_jobs
from tests.conftest import wait_until
from tests.testapp.jobs import throttled_touch, unique_touch

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


def failed(alias: str, job_id: int) -> None:
    """Mark the job failed two minutes ago: past any window of these jobs
    (rule 67 (unique-for-window))."""
    Job.objects.using(alias).filter(id=job_id).update(
        status="failed", finished_at=timezone.now() - timedelta(minutes=2))


def taken_over(alias: str, spec: Any = unique_touch) -> tuple[Job, Job]:
    """A job that failed, and the job a later enqueue of its key created (queued)."""
    first = spec.enqueue("a")
    failed(alias, first.id)
    second = spec.enqueue("a")
    assert second.id != first.id
    row = Job.objects.using(alias).get(id=first.id)
    assert (row.unique_key, row.released_key) == (None, second.unique_key)
    return row, second


def keys(alias: str) -> dict[int, tuple[str | None, str | None]]:
    return {i: (k, r) for i, k, r in Job.objects.using(alias).values_list(
        "id", "unique_key", "released_key")}


def test_a_retry_beside_the_keys_new_holder_is_refused_naming_it(alias: str) -> None:
    old, holder = taken_over(alias)
    result = retry_jobs([old.id], using=alias)
    assert result.retried_ids == () and result.keyless_ids == ()
    assert result.refused == (KeyHeld(old.id, "unique_touch", holder.unique_key, holder.id),)
    assert str(result.refused[0]) == (f"job {old.id}: key {holder.unique_key!r} is held by "
                                      f"job {holder.id}")
    assert Job.objects.using(alias).get(id=old.id).status == "failed"
    assert unique_touch.enqueue("a").id == holder.id


def test_keyless_retries_it_beside_the_holder_without_the_key(alias: str) -> None:
    old, holder = taken_over(alias)
    result = retry_jobs([old.id], using=alias, keyless=True)
    assert (result.retried_ids, result.keyless_ids, result.refused) == ((old.id,), (old.id,), ())
    row = Job.objects.using(alias).get(id=old.id)
    assert (row.status, row.unique_key) == ("queued", None)
    assert unique_touch.enqueue("a").id == holder.id


def test_the_key_comes_back_when_its_holder_finished(alias: str) -> None:
    # rules 66 (held-key-returns-holder), 67 (unique-for-window): the holder has no window, so an
    # enqueue could take the key now; so does the retry, and the next enqueue of the key returns the
    # retried job.
    old, holder = taken_over(alias)
    Job.objects.using(alias).filter(id=holder.id).update(status="succeeded", finished_at=Now())
    result = retry_jobs([old.id], using=alias)
    assert (result.retried_ids, result.refused) == ((old.id,), ())
    key = holder.unique_key
    assert keys(alias) == {old.id: (key, None), holder.id: (None, key)}
    assert Job.objects.using(alias).get(id=old.id).status == "queued"
    assert unique_touch.enqueue("a").id == old.id


def test_the_key_comes_back_when_its_holder_is_gone(alias: str) -> None:
    old, holder = taken_over(alias)
    Job.objects.using(alias).filter(id=holder.id).delete()  # pruned
    assert retry_jobs([old.id], using=alias).retried_ids == (old.id,)
    assert keys(alias) == {old.id: (holder.unique_key, None)}


def test_a_holder_in_its_unique_for_window_keeps_the_key(alias: str) -> None:
    # rule 67 (unique-for-window): finished a moment ago with unique_for=60, the holder still holds
    # its key.
    old, holder = taken_over(alias, throttled_touch)
    Job.objects.using(alias).filter(id=holder.id).update(status="succeeded", finished_at=Now())
    assert [h.holder_id for h in retry_jobs([old.id], using=alias).refused] == [holder.id]


def test_a_job_that_kept_its_key_is_retried_with_it(alias: str) -> None:
    first = unique_touch.enqueue("a")
    failed(alias, first.id)
    assert retry_jobs([first.id], using=alias).retried_ids == (first.id,)
    assert keys(alias) == {first.id: (first.unique_key, None)}
    assert unique_touch.enqueue("a").id == first.id


def test_only_the_held_ones_of_a_selection_are_refused(alias: str) -> None:
    old, _ = taken_over(alias)
    plain = unique_touch.enqueue("b")
    failed(alias, plain.id)
    result = retry_jobs(Job.objects.filter(status="failed"), using=alias)
    assert result.retried_ids == (plain.id,)
    assert [h.job_id for h in result.refused] == [old.id]


# -- racing an enqueue of the key -----------------------------------------------------------------


def in_thread(target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``target`` on a thread of its own (its own connection); its result or error in
    the dict."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = target()
        except BaseException as exc:  # surfaced by the test
            out["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def waiting_on_a_lock(alias: str, statement: threading.Event) -> bool:
    """Whether the other thread is waiting: on PostgreSQL, a backend of this database waiting
    on a lock; on SQLite (no such view), its write statement started (it waits for the single
    writer's lock under the busy timeout, or would have found the holder committed)."""
    if connections[alias].vendor != "postgresql":
        return statement.is_set()
    with connections[alias].cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'")
        return cur.fetchone()[0] > 0


def signalling_writes(alias: str, started: threading.Event) -> Callable[..., Any]:
    """An ``execute_wrapper`` that sets ``started`` when a statement that may write begins
    (any but a plain read)."""

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool,
                context: Any) -> Any:
        if not sql.lstrip().upper().startswith("SELECT"):
            started.set()
        return execute(sql, params, many, context)

    return wrapper


def test_a_holder_committed_while_the_retry_waits_is_not_missed(alias: str) -> None:
    """The enqueue's insert is not committed when the retry looks for a holder: the retry's
    update of the key waits for it (the unique index on PostgreSQL, the single writer on
    SQLite), and once it commits the retry is refused naming it, never run beside it."""
    old, holder = taken_over(alias)
    Job.objects.using(alias).filter(id=holder.id).delete()  # the key is free
    inserted, commit = threading.Event(), threading.Event()

    def enqueue_and_hold() -> int:
        with transaction.atomic(using=alias):
            new = unique_touch.enqueue("a")
            inserted.set()
            assert commit.wait(30)
        return new.id

    holding, held_out = in_thread(enqueue_and_hold)
    assert inserted.wait(30)
    wrote = threading.Event()

    def retry() -> Any:
        with connections[alias].execute_wrapper(signalling_writes(alias, wrote)):
            return retry_jobs([old.id], using=alias)

    retrying, retry_out = in_thread(retry)
    wait_until(lambda: waiting_on_a_lock(alias, wrote) or not retrying.is_alive(),
               message="the retry to wait for the enqueue's transaction")
    commit.set()
    holding.join(30)
    retrying.join(30)
    assert "error" not in held_out and "error" not in retry_out, (held_out, retry_out)
    new_id = held_out["result"]
    assert [(h.job_id, h.holder_id) for h in retry_out["result"].refused] == [(old.id, new_id)]
    assert Job.objects.using(alias).get(id=old.id).status == "failed"
    assert Job.objects.using(alias).filter(unique_key__isnull=False).count() == 1


def test_an_enqueue_racing_a_retry_that_took_the_key_back_returns_the_retried_job(
        alias: str) -> None:
    old, holder = taken_over(alias)
    Job.objects.using(alias).filter(id=holder.id).delete()
    retried, commit = threading.Event(), threading.Event()

    def retry_and_hold() -> Any:
        with transaction.atomic(using=alias):
            result = retry_jobs([old.id], using=alias)
            retried.set()
            assert commit.wait(30)
        return result

    holding, held_out = in_thread(retry_and_hold)
    assert retried.wait(30)
    wrote = threading.Event()

    def enqueue() -> int:
        with connections[alias].execute_wrapper(signalling_writes(alias, wrote)):
            return unique_touch.enqueue("a").id

    enqueuing, enqueue_out = in_thread(enqueue)
    wait_until(lambda: waiting_on_a_lock(alias, wrote) or not enqueuing.is_alive(),
               message="the enqueue to wait for the retry")
    commit.set()
    holding.join(30)
    enqueuing.join(30)
    assert "error" not in held_out and "error" not in enqueue_out, (held_out, enqueue_out)
    assert held_out["result"].retried_ids == (old.id,)
    assert enqueue_out["result"] == old.id
    assert Job.objects.using(alias).count() == 1
