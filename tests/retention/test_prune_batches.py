"""The prune's batches: one short statement each on PostgreSQL, the same counts on both
engines, no wait on a row another transaction holds, and Django's collector for a model the
statements do not know."""

from __future__ import annotations

import io
import threading
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_ultjobs.exceptions import WorkerShutdownError
from django_ultjobs.jobs import periodic
from django_ultjobs.models import Job, JobAttempt, JobStep
from django_ultjobs.store import get_store, retention
from django_ultjobs.store.retention import prune
from django_ultjobs.testing import run_jobs

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def _finished(alias: str, n: int, days_ago: float = 30, **extra: object) -> list[int]:
    """``n`` jobs finished ``days_ago``, each with an attempt row and a step; one in three
    holds its attempt on its row instead (rule 97 (attempt-on-row))."""
    at = timezone.now() - timedelta(days=days_ago)
    jobs = Job.objects.using(alias).bulk_create(
        Job(name="add", status="succeeded", finished_at=at, attempt_on_row=i % 3 == 0, **extra)
        for i in range(n))
    JobAttempt.objects.using(alias).bulk_create(
        JobAttempt(job=j, attempt=1, outcome="succeeded") for j in jobs)
    JobStep.objects.using(alias).bulk_create(JobStep(job=j, name="s", result=1) for j in jobs)
    return [j.id for j in jobs]


def test_batches_count_jobs_attempts_and_steps(alias: str) -> None:
    _finished(alias, 7)
    recent = _finished(alias, 2, days_ago=1)
    advanced: list[int] = []
    with CaptureQueriesContext(connections[alias]) as captured:
        pruned = prune(older_than=timedelta(days=14), using=alias, batch_size=3,
                       on_batch=advanced.append)
    assert (pruned.jobs, pruned.attempts, pruned.steps) == (7, 7 + 3, 7)
    assert advanced == [3, 3, 1]
    assert sorted(Job.objects.using(alias).values_list("id", flat=True)) == recent
    assert JobAttempt.objects.using(alias).count() == JobStep.objects.using(alias).count() == 2
    if connections[alias].vendor == "postgresql":
        # One statement per batch (jobs, attempts and steps together), and one that found none.
        batches = [q for q in captured.captured_queries if "django_ultjobs:prune_batch" in q["sql"]]
        assert len(batches) == 4


def test_each_batch_starts_at_the_newest_finish_of_the_one_before(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The finished-jobs index's entries of the rows deleted are dead until VACUUM: a batch
    that began at the oldest finish again would walk every one of them."""
    ids = [_finished(alias, 1, days_ago=30 - i)[0] for i in range(5)]
    starts: list[object] = []
    delete_batch = retention._delete_batch

    def recorded(store: object, cutoff: object, after: object, limit: int) -> object:
        starts.append(after)
        return delete_batch(store, cutoff, after, limit)  # type: ignore[arg-type]

    monkeypatch.setattr(retention, "_delete_batch", recorded)
    pruned = prune(older_than=timedelta(days=14), using=alias, batch_size=2)
    assert pruned.jobs == 5 and not Job.objects.using(alias).exists()
    finished = [timezone.now() - timedelta(days=30 - i) for i in range(5)]
    # None first, then the second and the fourth job's finish (each batch's newest), then the
    # fifth's, where the last batch found nothing.
    assert starts[0] is None and len(starts) == 4
    for start, expected in zip(starts[1:], (finished[1], finished[3], finished[4]), strict=True):
        at = get_store(alias).parse_time(start)
        assert abs((at - expected).total_seconds()) < 60, (ids, starts)


def test_a_row_another_transaction_holds_is_skipped_not_waited_for(pg_alias: str) -> None:
    """A retry or a unique key's release holding a finished row: the prune goes on without it."""
    held = _finished(pg_alias, 4)[0]
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic(using=pg_alias):
                Job.objects.using(pg_alias).select_for_update().get(id=held)
                locked.set()
                release.wait(30)
        finally:
            connections[pg_alias].close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        started = time.monotonic()
        pruned = prune(older_than=timedelta(days=14), using=pg_alias, batch_size=2)
        assert time.monotonic() - started < 10
    finally:
        release.set()
        holder.join()
    assert pruned.jobs == 3
    assert list(Job.objects.using(pg_alias).values_list("id", flat=True)) == [held]


def test_a_model_the_statements_do_not_know_goes_through_djangos_collector(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert retention._relations_known()  # the package's own models: the statements
    monkeypatch.setattr(retention, "KNOWN_RELATIONS", set())
    assert not retention._relations_known()
    _finished(alias, 4)
    pruned = prune(older_than=timedelta(days=14), using=alias, batch_size=3)
    assert (pruned.jobs, pruned.attempts, pruned.steps) == (4, 4 + 2, 4)
    assert not Job.objects.using(alias).exists()


def test_the_prune_pauses_after_each_full_batch(alias: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Between batches the prune waits ``pause`` seconds, spreading its load on the workers
    beside it; never after the last batch, nor with pause 0."""
    slept: list[float] = []
    monkeypatch.setattr(retention.time, "sleep", slept.append)
    _finished(alias, 7)
    prune(older_than=timedelta(days=14), using=alias, batch_size=3, pause=0.1)
    assert slept == [0.1, 0.1]
    slept.clear()
    _finished(alias, 6)
    prune(older_than=timedelta(days=14), using=alias, batch_size=3, pause=0.2)
    assert slept == [0.2, 0.2]  # the third batch found none
    slept.clear()
    _finished(alias, 4)
    prune(older_than=timedelta(days=14), using=alias, batch_size=3, pause=0)
    assert slept == []
    with pytest.raises(ValueError, match="pause"):
        prune(older_than=timedelta(days=14), using=alias, pause=float("nan"))


def _paced(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The rests a prune takes, with each batch's start and end on a fake clock: the first
    batch takes 0.5 s, the second 10 s (its rest capped), the third (short) 0.2 s, and the
    fourth finds none."""
    slept: list[float] = []
    clock = iter([100.0, 100.5, 101.0, 111.0, 112.0, 112.2, 113.0, 113.1])
    monkeypatch.setattr(retention.time, "sleep", slept.append)
    monkeypatch.setattr(retention, "monotonic", lambda: next(clock))
    return slept


def test_by_default_the_prune_rests_as_long_as_each_batch_took(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no ``pause`` the prune paces itself: after each full batch it rests as long as that
    batch took, at most ``MAX_REST``, so it keeps a core busy half the time on any server; never
    after the short last batch."""
    slept = _paced(monkeypatch)
    _finished(alias, 7)
    assert prune(older_than=timedelta(days=14), using=alias, batch_size=3).jobs == 7
    assert slept == [0.5, retention.MAX_REST]


def test_prunejobs_paces_itself_unless_told_otherwise(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _paced(monkeypatch)
    _finished(alias, 7)
    call_command("prunejobs", "--batch-size", "3", "--database", alias, stdout=io.StringIO())
    assert slept == [0.5, retention.MAX_REST]
    slept = _paced(monkeypatch)
    _finished(alias, 7)
    call_command("prunejobs", "--batch-size", "3", "--pause", "0", "--database", alias,
                 stdout=io.StringIO())
    assert slept == []


class _Run:
    """A run's context as the daily prune job uses it: ``wait`` returns early, cancelled, when
    ``cancel_in_wait`` says so."""

    def __init__(self, *, cancel_in_wait: bool = False) -> None:
        self.cancel_in_wait = cancel_in_wait
        self.cancelled = False
        self.waits: list[float] = []

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.cancelled = self.cancelled or self.cancel_in_wait
        return self.cancelled

    def raise_if_cancelled(self) -> None:
        if self.cancelled:
            raise WorkerShutdownError("the worker is stopping")


def test_the_daily_prune_job_paces_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in job runs beside the fleet: it leaves the pace to the prune's default and
    rests in its run's ``wait``, which a cancel cuts short."""
    calls: list[dict[str, object]] = []
    monkeypatch.setattr(periodic, "prune", lambda **kw: calls.append(kw) or retention.Pruned())
    periodic.prune_finished_jobs(_Run())
    assert len(calls) == 1 and calls[0].get("pause") is None and calls[0]["rest"] is not None


def test_a_cancelled_prune_job_stops_between_two_batches(alias: str) -> None:
    """Cancelled while it rests (a cancel request, the worker's drain), the daily job deletes no
    further batch: the first one is committed, the rest is left to a later run."""
    _finished(alias, retention_batch() + 1)
    run = _Run(cancel_in_wait=True)
    with pytest.raises(WorkerShutdownError):
        periodic.prune_finished_jobs(run)
    assert len(run.waits) == 1
    assert Job.objects.using(alias).count() == 1


def test_the_daily_prune_job_runs_with_its_context(alias: str) -> None:
    _finished(alias, 3)
    periodic.prune_finished_jobs.enqueue()
    (outcome,) = run_jobs(database=alias)
    assert (outcome.name, outcome.outcome) == (periodic.PRUNE_JOB, "succeeded")
    assert not Job.objects.using(alias).exclude(name=periodic.PRUNE_JOB).exists()


def retention_batch() -> int:
    """The batch size the daily job's prune uses (``prune``'s default)."""
    return int((retention.prune.__kwdefaults__ or {})["batch_size"])


def test_a_pause_that_is_no_number_of_seconds_is_refused(alias: str) -> None:
    for pause in (True, float("inf"), -0.5):
        with pytest.raises(ValueError, match="pause"):
            prune(older_than=timedelta(days=14), using=alias, pause=pause)
