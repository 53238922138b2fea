"""A settle the database refuses for its values, on both engines
(rules 30 (refused-outcome-no-wedge), 32 (landed-never-stale)).

Each engine is made to refuse by its own limits, never by a mock: PostgreSQL's jsonb refuses the
escape ``\\u0000`` (SQLSTATE 22P05), SQLite a parameter past its length limit (SQLITE_TOOBIG,
lowered here from the 1 GB of a stock build). What must hold is the same on both: the store tells
such a refusal from an outage, and the completer settles every other run of the batch and fails
the refused one, saying why.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from django.db import OperationalError, connections
from django.db.backends.signals import connection_created

from django_ultjobs.store import ClaimedJob, JobStore, Settlement
from django_ultjobs.store.attempts import history
from django_ultjobs.store.records import LostAttempt
from django_ultjobs.worker import completer as completer_module
from django_ultjobs.worker.completer import Completer
from django_ultjobs.worker.fleet_slots import FleetSlots
from django_ultjobs.worker.runs import Run, RunsInFlight
from tests.doubles import FakeClock
from tests.testapp.jobs import add

from .helpers import claim, enqueue, new_job, row, settlement

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

#: SQLite's length limit in these tests: a result of twice this is refused, the rest is not.
SQLITE_LIMIT = 200_000


@pytest.fixture
def refusing(alias: str) -> Iterator[str]:
    """A result text this engine refuses to store; every SQLite connection of the test (the
    completer's thread opens its own) gets the lowered length limit."""
    if alias == "postgres":
        yield '"\\u0000"'
        return

    def limit(sender: Any, connection: Any, **kwargs: Any) -> None:
        if connection.vendor == "sqlite":
            connection.connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, SQLITE_LIMIT)

    connection_created.connect(limit, weak=False)
    conn = connections[alias]
    conn.ensure_connection()
    before = conn.connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, SQLITE_LIMIT)
    try:
        yield '"' + "x" * (2 * SQLITE_LIMIT) + '"'
    finally:
        connection_created.disconnect(limit)
        conn.connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, before)


def _attempts(alias: str, job_id: int) -> list[tuple[int, str]]:
    return list(history(job_id, using=alias).values_list("attempt", "outcome"))


# -- the store: a refusal is not an outage ---------------------------------------------------------


def test_a_refused_value_is_told_from_an_outage_and_changes_nothing(
        cstore: JobStore, alias: str, refusing: str) -> None:  # rule 30 (refused-outcome-no-wedge)
    enqueue(cstore, new_job(), new_job())
    bad, good = claim(cstore)
    with pytest.raises(Exception) as refused:
        cstore.settle([settlement(bad, result_json=refusing), settlement(good)], "w1")
    assert cstore.refuses(refused.value), repr(refused.value)
    # Nothing of the batch was written, and the connection is fine for the next statement.
    assert row(alias, bad.id).status == row(alias, good.id).status == "running"
    assert cstore.settle([settlement(good)], "w1") == {good.id}


# rule 30 (refused-outcome-no-wedge), 31 (bounded-outcomes)
def test_values_python_cannot_encode_are_refusals_too(cstore: JobStore) -> None:
    enqueue(cstore, new_job())
    (job,) = claim(cstore)
    # allow_nan=False: NaN never reaches SQL as a token the database refuses whole.
    with pytest.raises(ValueError) as refused:
        cstore.settle([settlement(job, "waiting", wait_event="e",
                                  wait_match={"k": float("nan")})], "w1")
    assert cstore.refuses(refused.value)


# rule 30 (refused-outcome-no-wedge): waited out, never failed
def test_a_lost_connection_or_a_locked_database_is_an_outage(
        cstore: JobStore, alias: str) -> None:
    enqueue(cstore, new_job())
    (job,) = claim(cstore)
    conn = connections[alias]
    conn.ensure_connection()
    if alias == "postgres":
        pid = conn.connection.info.backend_pid
        with connections["postgres"].cursor():  # another thread's connection kills this one's
            killer = threading.Thread(target=_terminate, args=(pid,))
            killer.start()
            killer.join()
    else:
        other = sqlite3.connect(conn.settings_dict["NAME"], timeout=0)
        other.execute("BEGIN IMMEDIATE")
        conn.connection.execute("PRAGMA busy_timeout = 0")
    try:
        with pytest.raises(OperationalError) as outage:
            cstore.settle([settlement(job)], "w1")
    finally:
        if alias != "postgres":
            other.rollback()
            other.close()
            conn.connection.execute("PRAGMA busy_timeout = 30000")
    assert not cstore.refuses(outage.value), repr(outage.value)
    assert cstore.settle([settlement(job)], "w1") == {job.id}


def _terminate(pid: int) -> None:
    try:
        with connections["postgres"].cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        connections["postgres"].close()


# -- the store: did a settle land? ----------------------------------------------------------------


def test_settle_landed_finds_this_workers_written_settles_only(
        cstore: JobStore, clock: FakeClock) -> None:  # rule 32 (landed-never-stale)
    enqueue(cstore, new_job(), new_job(), new_job())
    written, lapsed, never = claim(cstore, "w1", timeout=10)
    done = settlement(written, error="boom\x00", outcome="failed", status="failed")
    assert cstore.settle([done], "w1") == {written.id}
    # w1's lease of `lapsed` ran out; w2 re-claimed it and recorded w1's attempt as lease_lost.
    clock.advance(11)
    assert lapsed.id in {job.id for job in claim(cstore, "w2")}
    cstore.record_attempts([LostAttempt(job_id=lapsed.id, attempt=lapsed.attempt,
                                        worker_id="w1", started_at=lapsed.claimed_at,
                                        outcome="lease_lost", error="lease lapsed")])
    late = settlement(lapsed, "queued", outcome="lease_lost", error="lease lost")
    assert cstore.settle([late], "w1") == set()
    asked = [done, late, settlement(never)]
    assert cstore.settle_landed(asked, "w1") == {written.id}
    assert cstore.settle_landed(asked, "w2") == set()
    assert cstore.settle_landed([settlement(never, outcome=None)], "w1") == set()


# -- the completer: split, settle the rest, fail the refused run ---------------------------------


def _completer(store: JobStore, runs: Sequence[tuple[Run, Settlement]]) -> Completer:
    registry = RunsInFlight()
    done = Completer(store=store, runs=registry,
                     slots=FleetSlots(store.slot_store, "w1", ttl=30.0), worker_id="w1")
    done.start()
    for run, outcome in runs:
        assert done.submit(run, outcome)
    done.stop(timeout=30.0)
    assert done.pending == 0 and done.pending_bytes == 0 and len(registry) == 0
    return done


def _runs(jobs: Sequence[ClaimedJob]) -> list[Run]:
    return [Run(job=job, spec=add) for job in jobs]


# rule 30 (refused-outcome-no-wedge)
@pytest.mark.parametrize("bad_at", [0, 6, 9])
def test_a_refused_outcome_fails_its_run_alone_and_the_rest_settle(
        cstore: JobStore, alias: str, refusing: str, bad_at: int) -> None:
    enqueue(cstore, *[new_job(max_attempts=3) for _ in range(10)])
    runs = _runs(claim(cstore, limit=10))
    outcomes = [settlement(run.job, result_json=refusing if i == bad_at else str(i))
                for i, run in enumerate(runs)]
    done = _completer(cstore, list(zip(runs, outcomes, strict=True)))
    bad = runs[bad_at].id
    assert done.unstorable == 1 and done.stale == 0
    for i, run in enumerate(runs):
        job = row(alias, run.id)
        if run.id != bad:
            assert (job.status, job.result, _attempts(alias, run.id)) == (
                "succeeded", i, [(1, "succeeded")])
    # The refused run: its attempt recorded as failed-and-retrying, the job back in the queue
    # under its backoff (attempt 1 of 3), the error saying what happened and the database's words.
    job = row(alias, bad)
    assert (job.status, job.attempt, job.result) == ("queued", 1, None)
    assert _attempts(alias, bad) == [(1, "retrying")]
    assert job.last_error.startswith("the outcome could not be stored: ")
    assert ("\\u0000" in job.last_error) if alias == "postgres" else (
        "string or blob too big" in job.last_error)


def test_a_refused_outcome_on_the_last_attempt_fails_the_job(
        cstore: JobStore, alias: str, refusing: str) -> None:  # rule 30 (refused-outcome-no-wedge)
    enqueue(cstore, new_job(max_attempts=1))
    runs = _runs(claim(cstore))
    _completer(cstore, [(runs[0], settlement(runs[0].job, result_json=refusing))])
    job = row(alias, runs[0].id)
    assert (job.status, _attempts(alias, job.id)) == ("failed", [(1, "failed")])
    assert "the outcome could not be stored" in job.last_error


# rule 31 (bounded-outcomes)
def test_batches_are_bounded_by_bytes(cstore: JobStore, alias: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(completer_module, "MAX_BATCH_BYTES", 2_000)
    sizes: list[int] = []
    settle = cstore.settle

    def recording(settlements: Sequence[Settlement], worker_id: str) -> set[int]:
        sizes.append(len(settlements))
        return settle(settlements, worker_id)

    monkeypatch.setattr(cstore, "settle", recording)
    enqueue(cstore, *[new_job() for _ in range(6)])
    runs = _runs(claim(cstore))
    # Each outcome is about 1,000 bytes: two fit under the bound, three do not.
    _completer(cstore, [(run, settlement(run.job, result_json=f'"{"y" * 600}"'))
                        for run in runs])
    assert max(sizes) <= 2 and sum(sizes) == 6, sizes
    assert all(row(alias, run.id).status == "succeeded" for run in runs)
