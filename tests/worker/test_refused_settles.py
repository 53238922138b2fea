"""Outcomes the database refuses, results too large, lost commit replies
(rules 30 (refused-outcome-no-wedge) to 32 (landed-never-stale)).

The worker must never be wedged by one outcome: a settle batch the database refuses for its values
is split until the refused run is alone, and that run fails saying why while every other run of
the batch settles. A result over ``MAX_RESULT_BYTES`` fails in the worker before any SQL. A settle
whose commit reply was lost is confirmed, not logged as stale. Real worker processes meet each
engine's own refusal: SQLite's length limit (lowered to a megabyte, as a stock build has it at a
gigabyte) and PostgreSQL's 256 MB jsonb string limit, at its real size.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from django.db import OperationalError
from django.test.utils import override_settings

from django_ultjobs.models import AttemptRecord, Job
from django_ultjobs.store import Settlement
from django_ultjobs.worker import claim_loop
from django_ultjobs.worker.completer import MAX_BATCH_BYTES
from tests.conftest import WorkerProcesses, engine_store, events, running_worker, wait_until
from tests.doubles import settle_outage_store
from tests.testapp.jobs import record, sized_result
from tests.testapp.models import RunLog

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def attempts(alias: str, job_id: int) -> list[tuple[int, str]]:
    return list(AttemptRecord.objects.using(alias).filter(job_id=job_id)
                .order_by("id").values_list("attempt", "outcome"))


def finished(alias: str, ids: Sequence[int]) -> Any:
    return lambda: not Job.objects.using(alias).filter(
        id__in=ids, status__in=("queued", "running")).exists()


# -- MAX_RESULT_BYTES (rule 31 (bounded-outcomes))
# --------------------------------------------------------------------


def test_a_result_over_max_result_bytes_fails_in_the_worker_before_any_sql(alias: str) -> None:
    written: list[int] = []

    class Recording(engine_store(alias)):  # type: ignore[misc,valid-type]
        def settle(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
            written.extend(len(s.result_json or "") for s in settlements)
            return super().settle(settlements, worker_id)

    with override_settings(ULTJOBS={"DATABASE": alias, "MAX_RESULT_BYTES": 1_000}):
        big = sized_result.enqueue(1_000)  # 1,002 bytes as JSON, with its quotes
        small = sized_result.enqueue(998)  # exactly the bound
        with running_worker(alias, store=Recording(alias)):
            wait_until(finished(alias, [big.id, small.id]), timeout=30)
    job = Job.objects.using(alias).get(id=big.id)
    # Retried by its policy (max_attempts=2), then failed; both attempts recorded.
    assert (job.status, attempts(alias, big.id)) == ("failed", [(1, "retrying"), (2, "failed")])
    assert "JobResultTooLargeError" in job.last_error
    assert 'is 1,002 bytes as JSON, over ULTJOBS["MAX_RESULT_BYTES"] (1,000)' in job.last_error
    assert Job.objects.using(alias).get(id=small.id).status == "succeeded"
    assert max(written) == 1_000  # the refused result never reached a statement


def test_the_default_bound_is_four_mebibytes(pg_alias: str) -> None:
    over = sized_result.using(max_attempts=1).enqueue(4 * 1024 * 1024)  # + 2 quotes
    at = sized_result.using(max_attempts=1).enqueue(4 * 1024 * 1024 - 2)
    with running_worker(pg_alias):
        wait_until(finished(pg_alias, [over.id, at.id]), timeout=60)
    assert Job.objects.using(pg_alias).get(id=over.id).status == "failed"
    assert "MAX_RESULT_BYTES" in Job.objects.using(pg_alias).get(id=over.id).last_error
    assert Job.objects.using(pg_alias).get(id=at.id).status == "succeeded"


# -- memory stays bounded while the completer cannot write (rule 31 (bounded-outcomes))
# -------------------------------


def test_claiming_stops_when_unsettled_outcomes_hold_too_many_bytes(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claim_loop, "MAX_UNSETTLED_BYTES", 50_000)
    outage = threading.Event()
    outage.set()

    store = settle_outage_store(alias, outage)

    # Each outcome holds ~20 kB: three reach the byte bound long before the count bound (1,000).
    ids = [sized_result.enqueue(20_000).id for _ in range(30)]
    with running_worker(alias, store=store, threads=2,
                        visibility_timeout=10.0) as worker:
        wait_until(lambda: worker.completer.pending_bytes >= 50_000, timeout=15)
        claims = worker.claim_statements
        time.sleep(0.5)  # several polls: the loop must not have claimed on meanwhile
        running = Job.objects.using(alias).filter(id__in=ids, status="running").count()
        assert running <= 3 + 2, running
        assert worker.claim_statements - claims <= 1
        outage.clear()
        wait_until(lambda: Job.objects.using(alias).filter(id__in=ids, status="succeeded")
                   .count() == len(ids), timeout=30)
    assert worker.completer.pending_bytes == 0


# -- a lost commit reply (rule 32 (landed-never-stale))
# -----------------------------------------------------------------


def test_a_settle_whose_commit_reply_was_lost_is_not_called_stale(
        alias: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="django_ultjobs")
    lost = threading.Event()

    class LostReply(engine_store(alias)):  # type: ignore[misc,valid-type]
        def settle(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
            applied = super().settle(settlements, worker_id)
            if not lost.is_set():
                # Committed, then the connection died before the reply (an immediate restart
                # of PostgreSQL, a dropped network): the worker hears only the error.
                lost.set()
                raise OperationalError("server closed the connection unexpectedly")
            return applied

    ids = [record.enqueue(label=f"r{i}").id for i in range(5)]
    with running_worker(alias, store=LostReply(alias)) as worker:
        wait_until(lambda: Job.objects.using(alias).filter(id__in=ids, status="succeeded")
                   .count() == len(ids) and worker.completer.pending == 0, timeout=30)
    assert lost.is_set()
    assert worker.completer.stale == 0
    assert events(caplog, "jobs.worker.settle-stale") == []
    confirmed = events(caplog, "jobs.worker.settled", note="written before a lost reply")
    assert confirmed, "the retried settle found nothing to confirm"
    for job_id in ids:  # each run settled once, its attempt recorded once
        assert attempts(alias, job_id) == [(1, "succeeded")]


# -- real worker processes, real refusals (rule 30 (refused-outcome-no-wedge))
# ----------------------------------------------


def _settled_all(alias: str, good: Sequence[int], bad: int) -> Any:
    return lambda: (Job.objects.using(alias).filter(id__in=good, status="succeeded").count()
                    == len(good)
                    and Job.objects.using(alias).get(id=bad).status == "failed")


def test_sqlite_refusing_an_outcome_fails_that_job_alone(
        worker_processes: WorkerProcesses) -> None:
    # SQLite refuses a parameter past its length limit: here 1 MB, and the 1.2 MB result (under
    # MAX_RESULT_BYTES) makes every batch holding it too long. Before
    # rule 30 (refused-outcome-no-wedge) the completer retried that batch for ever and no later
    # outcome of the worker was written.
    bad = sized_result.enqueue(1_200_000).id
    good = [record.enqueue(label=f"g{i}").id for i in range(40)]
    worker_processes.start("default", "--threads", "4", "--poll-interval", "0.05",
                           env={"ULTJOBS_TEST_SQLITE_MAX_LENGTH": "1000000"})
    wait_until(_settled_all("default", good, bad), timeout=60,
               message="every job settled")
    job = Job.objects.get(id=bad)
    assert attempts("default", bad) == [(1, "retrying"), (2, "failed")]
    assert job.last_error.startswith("the outcome could not be stored: ")
    assert "string or blob too big" in job.last_error
    assert RunLog.objects.filter(job_id__in=good).count() == len(good)  # none ran twice


def test_postgresql_refusing_a_jsonb_string_over_256_mb_fails_that_job_alone(
        worker_processes: WorkerProcesses, pg_alias: str) -> None:
    # PostgreSQL's own limit, at its real size: a jsonb string holds at most 268,435,455 bytes.
    # MAX_RESULT_BYTES is raised past it for this worker so the database is what refuses.
    bad = sized_result.using(max_attempts=1).enqueue(270_000_000).id
    good = [record.enqueue(label=f"g{i}").id for i in range(20)]
    proc = worker_processes.start("postgres", "--threads", "4", "--poll-interval", "0.05",
                                  env={"ULTJOBS_TEST_MAX_RESULT_BYTES": "300000000"})
    wait_until(_settled_all("postgres", good, bad), timeout=180,
               message="every job settled")
    job = Job.objects.using("postgres").get(id=bad)
    assert attempts("postgres", bad) == [(1, "failed")]
    assert "string too long to represent as jsonb string" in job.last_error
    assert "268435455" in job.last_error  # the database's DETAIL, kept
    # Later jobs still settle: the worker is not wedged.
    later = record.enqueue(label="later").id
    wait_until(lambda: Job.objects.using("postgres").get(id=later).status == "succeeded",
               timeout=30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, worker_processes.logs()
    assert RunLog.objects.using("postgres").filter(job_id__in=[*good, later]).count() == 21


def test_a_refused_outcome_then_sigterm_runs_no_body_twice(
        worker_processes: WorkerProcesses) -> None:
    # The deploy after a refusal: before rule 30 (refused-outcome-no-wedge) the completer retried
    # the refused batch for ever, the claim loop ran bodies until 1,000 outcomes waited, and SIGTERM
    # dropped every outcome not written; the next worker ran each of those bodies again (here 499 of
    # 600). Now the refused run fails alone, every other outcome is written, and a drain loses
    # nothing.
    flags = ("--threads", "8", "--poll-interval", "0.05", "--visibility-timeout", "2",
             "--heartbeat-interval", "0.5")
    env = {"ULTJOBS_TEST_SQLITE_MAX_LENGTH": "1000000"}
    bad = sized_result.using(max_attempts=1).enqueue(1_200_000).id
    good = record.bulk_enqueue([()] * 600)
    first = worker_processes.start("default", *flags, env=env)
    wait_until(lambda: RunLog.objects.filter(job_id__in=good).count() >= 500, timeout=120,
               message="most bodies ran")
    first.send_signal(signal.SIGTERM)
    first.wait(60)
    worker_processes.start("default", *flags, env=env)
    wait_until(_settled_all("default", good, bad), timeout=120, message="every job settled")
    runs = RunLog.objects.filter(job_id__in=good).count()
    assert runs == len(good), f"{runs - len(good)} bodies ran twice"


def test_many_large_results_are_written_in_batches_postgresql_accepts(
        pg_alias: str) -> None:
    # 60 results of 5 MB waiting together (a settle outage held them): in one batch, 300 MB,
    # held in memory three times over while it is encoded and sent (and, while the batch was
    # one JSON value, past the 256 MB PostgreSQL allows a jsonb array: refused whole). Batches
    # are bounded by bytes (rule 31 (bounded-outcomes)), and the backlog too (claiming stops at 128
    # MB), so each batch is written as it is, none past the bound by more than one run's outcome.
    outage = threading.Event()
    outage.set()

    store = settle_outage_store(pg_alias, outage, "the database system is starting up")
    batch_bytes: list[int] = []
    settle = store.settle

    def counted(settlements: Sequence[Settlement], worker_id: str) -> set[int]:
        written = settle(settlements, worker_id)
        batch_bytes.append(sum(len(s.result_json or "") for s in settlements))
        return written

    store.settle = counted  # type: ignore[method-assign]

    ids = sized_result.bulk_enqueue([(5_000_000,)] * 60)
    with override_settings(ULTJOBS={"DATABASE": pg_alias, "MAX_RESULT_BYTES": 6_000_000}), \
            running_worker(pg_alias, store=store, threads=8,
                           visibility_timeout=30.0) as worker:
        # As many outcomes as the worker lets wait: all 60 without a byte bound.
        wait_until(lambda: worker.completer.pending == 60 or (
            worker.pool.busy == 0 and worker.completer.pending >= 20), timeout=120)
        time.sleep(0.5)
        outage.clear()
        wait_until(lambda: Job.objects.using(pg_alias).filter(id__in=ids, status="succeeded")
                   .count() == len(ids), timeout=120, message="every job succeeded")
        assert worker.completer.unstorable == 0
    assert AttemptRecord.objects.using(pg_alias).filter(job_id__in=ids).count() == len(ids)
    assert max(batch_bytes) <= MAX_BATCH_BYTES + 6_000_000, batch_bytes
