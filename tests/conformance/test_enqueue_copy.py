"""A bulk enqueue big enough for COPY (PostgreSQL) writes what the INSERT writes
(rule 95 (copy-writes-as-insert)).

PostgreSQL's store sends a batch of ``COPY_MIN_JOBS`` or more by COPY,
every other batch (and SQLite's every batch) by INSERT: the rows, the ids, the transaction and
the wake-ups must be the same either way, on both engines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext, override_settings

from django_ultjobs import JobArgumentError
from django_ultjobs.models import Job
from django_ultjobs.store import JobStore, NewJob, get_store
from django_ultjobs.store.copy_rows import COPY_MIN_JOBS
from tests.testapp.jobs import add, noop

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

_TAG = re.compile(r"/\* django_ultjobs:([a-z_]+) \*/")
#: Text COPY's text format escapes, and JSON's, in every text column and argument.
_ODD = "tab\there, new\nline, cr\rback\\slash \\N, quote\" é ✓ 𝄞"


def _varied(count: int) -> list[NewJob]:
    """``count`` jobs between them setting every column an enqueue writes to something other
    than its default (a column the COPY left out would then differ from the INSERT's)."""
    run_at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    return [
        NewJob(name="add" if i % 2 else "noop", queue=f"q{i % 3}", priority=i - 50,
               args=[i, _ODD, {"nested": [1.5, None, True]}] if i % 4 else [],
               kwargs={"k\tey": _ODD, "n": i} if i % 5 else {}, max_attempts=1 + i % 7,
               delay=[0.0, 1.5, 0.0000015, 3600.25][i % 4], run_at=run_at if i % 9 == 0 else None,
               traceparent=f"00-{i:032x}-{i:016x}-01" if i % 2 else "",
               tracestate="k=v" if i % 3 else "", enqueued_by=f"user:{i}\t{_ODD}",
               concurrency_key=f"key\\{i % 4}" if i % 6 else "",
               timeout=None if i % 8 == 0 else i / 7, expires_in=None if i % 5 else 60.125 + i,
               tags=("a", f"b\\{i}", _ODD) if i % 3 else ())
        for i in range(count)
    ]


def _columns(alias: str, ids: list[int]) -> list[dict[str, Any]]:
    """Every column of the rows ``ids`` but the id, in their order."""
    rows = {r["id"]: r for r in Job.objects.using(alias).filter(id__in=ids).values()}
    return [{k: v for k, v in rows[i].items() if k != "id"} for i in ids]


def test_a_copied_batch_writes_every_column_the_insert_writes(cstore: JobStore,
                                                              alias: str) -> None:
    # rule 95 (copy-writes-as-insert)
    # Both engines: on PostgreSQL the first batch goes by COPY, the second (the base store's
    # one INSERT) does not; on SQLite both are the INSERT. Same clock, so same times.
    jobs = _varied(COPY_MIN_JOBS + 20)
    copied = [r.id for r in cstore.enqueue(jobs)]
    inserted = [r.id for r in JobStore.enqueue(cstore, jobs)]
    assert copied == sorted(copied) and inserted == sorted(inserted)
    got, want = _columns(alias, copied), _columns(alias, inserted)
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a == b, (index, {k: (a[k], b[k]) for k in a if a[k] != b[k]})
    assert got[1]["tags"] == ["a", "b\\1", _ODD] and got[1]["args"][1] == _ODD


def _plain(count: int) -> list[NewJob]:
    """``_varied`` jobs without a timeout, an expiry, a slot key or tags: a plain batch."""
    return [replace(job, timeout=None, expires_in=None, concurrency_key="", tags=())
            for job in _varied(count)]


@pytest.mark.parametrize("odd", [None, "timeout", "expires_in", "concurrency_key", "tags",
                                 "run_at"])
def test_a_plain_batch_writes_every_column_the_insert_writes(cstore: JobStore, alias: str,
                                                             odd: str | None) -> None:
    # rules 95 (copy-writes-as-insert) and 101 (bulk-shortcuts-same-outcome): the columns a plain
    # batch leaves out take the values the INSERT writes, and its binary rows hold what the text
    # rows do; one job setting any of those columns (its last), or a naive run_at (a store's caller,
    # never a spec, may give one), sends the batch with every column, in text.
    jobs = _plain(COPY_MIN_JOBS + 20)
    if odd is not None:
        jobs[-1] = replace(jobs[-1], **{odd: {"timeout": 2.5, "expires_in": 30.0,
                                              "concurrency_key": "k", "tags": ("t",),
                                              "run_at": datetime(2031, 1, 2, 3, 4, 5, 6)}[odd]})
    conn = connections[alias]
    with CaptureQueriesContext(conn) as ctx:
        copied = [r.id for r in cstore.enqueue(jobs)]
    inserted = [r.id for r in JobStore.enqueue(cstore, jobs)]
    if conn.vendor == "postgresql":
        sent = [m.group(1) for q in ctx.captured_queries if (m := _TAG.search(q["sql"]))]
        assert sent == ["enqueue_copy_ids",
                        "enqueue_copy_plain" if odd is None else "enqueue_copy"]
    got, want = _columns(alias, copied), _columns(alias, inserted)
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a == b, (index, {k: (a[k], b[k]) for k in a if a[k] != b[k]})
    assert got[0]["tags"] == [] and got[0]["timeout"] is None and got[0]["concurrency_key"] == ""


def test_bulk_enqueue_returns_the_ids_enqueue_returns(cstore: JobStore, alias: str) -> None:
    # rule 101 (bulk-shortcuts-same-outcome): the ids alone, without the rows' times, in the jobs'
    # order.
    for count in (1, 5, COPY_MIN_JOBS + 3):
        ids = cstore.enqueue_ids(_varied(count))
        assert len(ids) == count and ids == sorted(ids)
        assert list(Job.objects.using(alias).filter(id__in=ids).order_by("id")
                    .values_list("id", flat=True)) == ids


def test_a_copied_batch_returns_what_it_wrote(cstore: JobStore, alias: str) -> None:
    # rule 95 (copy-writes-as-insert)
    jobs = _varied(COPY_MIN_JOBS)
    returned = cstore.enqueue(jobs)
    stored = {j.id: j for j in Job.objects.using(alias).filter(id__in=[r.id for r in returned])}
    assert len(stored) == len(jobs)
    for r in returned:
        job = stored[r.id]
        assert (r.visible_at, r.created_at, r.expires_at) == (
            job.visible_at, job.created_at, job.expires_at)


def test_a_copied_batch_reads_the_database_clock_as_the_insert_does(pg_alias: str) -> None:
    # rule 95 (copy-writes-as-insert)
    # Without an injected clock: now() is the transaction's start, so inside one transaction the
    # COPY's times and the INSERT's are the same instant.
    store = get_store(pg_alias)
    jobs = _varied(COPY_MIN_JOBS)
    with transaction.atomic(using=pg_alias):
        copied = [r.id for r in store.enqueue(jobs)]
        inserted = [r.id for r in JobStore.enqueue(store, jobs)]
        with connections[pg_alias].cursor() as cur:
            cur.execute("SELECT now()")
            (now,) = cur.fetchone()
    assert _columns(pg_alias, copied) == _columns(pg_alias, inserted)
    first = Job.objects.using(pg_alias).get(id=copied[1])
    assert first.created_at == now and first.visible_at == now + timedelta(seconds=1.5)


def test_bulk_enqueue_of_50_000_keeps_every_job_in_order(alias: str) -> None:
    # rule 95 (copy-writes-as-insert)
    ids = add.bulk_enqueue([(i, -i) for i in range(50_000)])
    assert len(ids) == 50_000 and ids == sorted(ids) and len(set(ids)) == 50_000
    rows = list(Job.objects.using(alias).order_by("id").values_list("id", "args"))
    assert rows == [(job_id, [i, -i]) for i, job_id in enumerate(ids)]


def test_a_copied_batch_rolls_back_with_the_callers_transaction(alias: str) -> None:
    # rule 95 (copy-writes-as-insert)
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        noop.bulk_enqueue([()] * (COPY_MIN_JOBS * 3))
        assert Job.objects.using(alias).count() == COPY_MIN_JOBS * 3
        raise RuntimeError("the view failed")
    assert Job.objects.using(alias).count() == 0


def test_a_copied_batch_in_a_rolled_back_savepoint_leaves_the_outer_rows(alias: str) -> None:
    # rule 95 (copy-writes-as-insert)
    with transaction.atomic(using=alias):
        outer = noop.bulk_enqueue([()] * COPY_MIN_JOBS)
        with pytest.raises(RuntimeError), transaction.atomic(using=alias):
            noop.bulk_enqueue([()] * COPY_MIN_JOBS)
            raise RuntimeError("inner block failed")
    assert sorted(Job.objects.using(alias).values_list("id", flat=True)) == outer


def test_one_bad_call_in_a_large_batch_writes_nothing_and_says_the_same(alias: str) -> None:
    # rules 16 (bad-input-refused) and 95 (copy-writes-as-insert): checked before any SQL, whatever
    # the batch's size.
    def attempt(count: int, bad: tuple[Any, ...]) -> str:
        with pytest.raises(JobArgumentError) as caught:
            add.bulk_enqueue([(i, i) for i in range(count)] + [bad])
        return str(caught.value)

    for bad in [(1, {"k\x00": 1}), (1,), (float("nan"), 1)]:
        assert attempt(COPY_MIN_JOBS * 2, bad) == attempt(1, bad)
    assert Job.objects.using(alias).count() == 0


def test_a_copied_batch_shows_its_statements_to_djangos_instrumentation(alias: str) -> None:
    # rules 41 (instrumented-statements) and 95 (copy-writes-as-insert): the COPY passes through
    # Django's cursor, its query log and execute wrappers.
    seen: list[str] = []

    def watch(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    conn = connections[alias]
    with transaction.atomic(using=alias), CaptureQueriesContext(conn) as ctx, \
            conn.execute_wrapper(watch):
        noop.bulk_enqueue([()] * COPY_MIN_JOBS)
    logged = [_TAG.search(q["sql"]).group(1) for q in ctx.captured_queries]
    assert logged == [_TAG.search(sql).group(1) for sql in seen]
    # noop's jobs set none of the columns a plain batch leaves out
    # (rule 101 (bulk-shortcuts-same-outcome)).
    assert logged == (["enqueue_copy_ids", "enqueue_copy_plain"] if conn.vendor == "postgresql"
                      else ["enqueue"])
    with CaptureQueriesContext(conn) as below:
        noop.bulk_enqueue([()] * (COPY_MIN_JOBS - 1))
    assert [_TAG.search(q["sql"]).group(1) for q in below.captured_queries] == ["enqueue"]


@contextmanager
def _listening(alias: str) -> Iterator[psycopg.Connection[Any]]:
    params = connections[alias].get_connection_params()
    keep = {k: params[k] for k in ("dbname", "user", "password", "host", "port") if k in params}
    with psycopg.connect(**keep, autocommit=True) as conn:
        conn.execute("LISTEN django_ultjobs")
        yield conn


def _payloads(conn: psycopg.Connection[Any], wait: float) -> set[str]:
    return {n.payload for n in conn.notifies(timeout=wait, stop_after=100)}


def test_a_copied_batch_wakes_the_queues_with_due_jobs_on_commit_only(pg_alias: str) -> None:
    # rule 95 (copy-writes-as-insert)
    later = datetime.now(UTC) + timedelta(hours=1)
    with _listening(pg_alias) as listener:
        with transaction.atomic(using=pg_alias):
            noop.using(queue="due").bulk_enqueue([()] * COPY_MIN_JOBS)
            noop.using(queue="delayed", delay=30).bulk_enqueue([()] * COPY_MIN_JOBS)
            noop.using(queue="later", run_at=later).bulk_enqueue([()] * COPY_MIN_JOBS)
            noop.using(queue="past", run_at=later - timedelta(days=1)).bulk_enqueue(
                [()] * COPY_MIN_JOBS)
            assert _payloads(listener, 0.2) == set()
        assert _payloads(listener, 2.0) == {"due", "past"}
        with pytest.raises(RuntimeError), transaction.atomic(using=pg_alias):
            noop.bulk_enqueue([()] * COPY_MIN_JOBS)
            raise RuntimeError("rolled back")
        assert _payloads(listener, 0.3) == set()


def test_with_use_tz_off_a_large_batch_keeps_the_insert(pg_alias: str) -> None:
    # rule 95 (copy-writes-as-insert): COPY's times are computed in Python from the database's
    # clock; naive wall-clock times would shift across a DST change where the INSERT's server-side
    # interval does not.
    conn = connections[pg_alias]
    with override_settings(USE_TZ=False), CaptureQueriesContext(conn) as ctx:
        ids = noop.bulk_enqueue([()] * COPY_MIN_JOBS)
    assert len(ids) == COPY_MIN_JOBS
    assert [_TAG.search(q["sql"]).group(1) for q in ctx.captured_queries] == ["enqueue"]
