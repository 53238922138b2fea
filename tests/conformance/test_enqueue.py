"""Enqueue, on both engines: ids in order, one statement per batch, JSON only, transactional."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction

from django_ultjobs import JobArgumentError, bulk_enqueue
from django_ultjobs.jobs.registry import get_job
from django_ultjobs.models import Job
from django_ultjobs.store import JobStore
from django_ultjobs.store.copy_rows import COPY_MIN_JOBS
from tests.doubles import FakeClock
from tests.testapp.jobs import add, noop, record

from .helpers import claim, enqueue, new_job, row

# available_apps: between tests, flush only the queue's tables and skip re-creating every
# app's permissions and content types (the suite runs ~5x faster).
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


class _CountingCursor:
    """A DB-API cursor that records every statement it executes."""

    def __init__(self, cursor: Any, seen: list[str]) -> None:
        self._cursor = cursor
        self._seen = seen

    def execute(self, sql: str, params: Any = None, **options: Any) -> Any:
        self._seen.append(sql)
        return self._cursor.execute(sql, params, **options)

    def executemany(self, sql: str, params: Any) -> Any:
        self._seen.extend(sql for _ in params)
        return self._cursor.executemany(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement the store sends, counted at the store's own cursor (what Django's hooks
    see is held in test_query_instrumentation.py, rule 41 (instrumented-statements))."""
    seen: list[str] = []
    original = JobStore.cursor

    @contextmanager
    def counting(self: JobStore) -> Iterator[Any]:
        with original(self) as cur:
            yield _CountingCursor(cur, seen)

    monkeypatch.setattr(JobStore, "cursor", counting)
    return seen


def _count(alias: str) -> int:
    return Job.objects.using(alias).count()


# -- ids and batches ------------------------------------------------------------------------------


def test_enqueue_returns_ids_in_the_callers_order(cstore: JobStore, alias: str) -> None:
    names = [f"job{i}" for i in range(7)]
    ids = enqueue(cstore, *(new_job(name) for name in names))
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert [row(alias, i).name for i in ids] == names


def test_bulk_enqueue_below_the_copy_size_is_one_statement(alias: str,
                                                          statements: list[str]) -> None:
    # From COPY_MIN_JOBS PostgreSQL sends two (test_enqueue_copy.py).
    count = COPY_MIN_JOBS - 1
    ids = add.bulk_enqueue([(i, i + 1) for i in range(count)])
    assert len(statements) == 1, statements
    assert len(ids) == count and ids == sorted(ids) and len(set(ids)) == count
    rows = list(Job.objects.using(alias).order_by("id").values_list("id", "args", "status"))
    assert rows == [(job_id, [i, i + 1], "queued") for i, job_id in enumerate(ids)]


def test_bulk_enqueue_of_several_jobs_keeps_call_order(alias: str,
                                                      statements: list[str]) -> None:
    calls = [add.call(1, 2), noop.call(), record.call(label="x"), add.call(3, b=4)]
    ids = bulk_enqueue(calls)
    assert len(statements) == 1
    jobs = [row(alias, i) for i in ids]
    assert [(j.name, j.args, j.kwargs) for j in jobs] == [
        ("add", [1, 2], {}), ("noop", [], {}), ("record", [], {"label": "x"}),
        ("add", [3], {"b": 4}),
    ]
    assert [j.max_attempts for j in jobs] == [3, 1, 5, 3]
    assert bulk_enqueue([]) == []


def test_enqueue_returns_the_row_as_stored(alias: str) -> None:
    job = add.enqueue(2, b=3)
    stored = row(alias, job.id)
    for field in Job._meta.concrete_fields:  # every column, as a query loads it
        assert getattr(job, field.attname) == getattr(stored, field.attname), field.attname
    assert (stored.args, stored.kwargs) == ([2], {"b": 3})
    assert job._state.db == alias and not job._state.adding
    # Saving it changes nothing and inserts nothing (an UPDATE of the row it is).
    job.save()
    assert Job.objects.using(alias).count() == 1 and row(alias, job.id).args == [2]


def test_arguments_round_trip_through_the_claim(cstore: JobStore) -> None:
    args: list[Any] = [0, -7, 2**62, 1.5, 0.1, "", "é ✓ 😀", True, False, None, [], {},
                       [1, [2, [3]]], {"a": {"b": [None, "c"]}}]
    kwargs = {"x": 'quote " backslash \\ newline \n', "nested": {"k": [1.25, "v"]}}
    enqueue(cstore, new_job(args=args, kwargs=kwargs))
    (got,) = claim(cstore)
    assert got.args == args and got.kwargs == kwargs
    assert [type(v) for v in got.args] == [type(v) for v in args]


# -- JSON only ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((object(), 1), {}, "argument 0 of add()"),
        ((1, {1, 2}), {}, "argument 1 of add()"),
        ((1,), {"b": b"bytes"}, "argument 'b' of add()"),
        ((1, [1, {"x": [2, object()]}]), {}, "argument 1 of add() at [1]['x'][1]"),
        ((1,), {"b": {1: "a"}}, "argument 'b' of add() has the key 1 (int)"),
        ((1,), {"b": {"ok": {(1, 2): "a"}}}, "argument 'b' of add() at ['ok'] has the key"),
        ((float("nan"), 1), {}, "argument 0 of add() is nan"),
        ((1, [float("inf")]), {}, "argument 1 of add() at [0] is inf"),
        ((1,), {"b": {"x": -float("inf")}}, "argument 'b' of add() at ['x'] is -inf"),
        # JSON, but not text PostgreSQL can store: refused on both engines alike.
        (("a\x00b", 1), {}, "argument 0 of add() is a string that contains a NUL"),
        ((1,), {"b": ["ok", "\ud800"]}, "argument 'b' of add() at [1] is a string that "
                                          "contains a lone surrogate"),
        ((1,), {"b": {"k\x00": 1}}, "argument 'b' of add() has a key that contains a NUL"),
    ],
)
def test_non_json_arguments_raise_type_error_naming_the_argument_and_write_nothing(
    alias: str, args: tuple[Any, ...], kwargs: dict[str, Any], expected: str
) -> None:
    with pytest.raises(TypeError) as caught:
        add.enqueue(*args, **kwargs)
    assert isinstance(caught.value, JobArgumentError)
    assert expected in str(caught.value)
    assert _count(alias) == 0


def test_a_model_instance_argument_says_pass_the_pk(alias: str) -> None:
    instance = Job(id=1, name="x")
    with pytest.raises(JobArgumentError, match=r"\.pk"):
        add.enqueue(instance, 1)
    assert _count(alias) == 0


def test_one_bad_call_in_a_bulk_enqueue_writes_no_row(alias: str) -> None:
    with pytest.raises(JobArgumentError, match="argument 1 of add"):
        add.bulk_enqueue([(1, 2), (3, 4), (5, object()), (6, 7)])
    with pytest.raises(JobArgumentError, match="nan"):
        bulk_enqueue([add.call(1, 2), noop.call(), add.call(float("nan"), 1)])
    assert _count(alias) == 0


# -- transactional enqueue ------------------------------------------------------------------------


def test_enqueue_in_a_transaction_that_rolls_back_leaves_no_row(alias: str) -> None:
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        add.enqueue(1, 2)
        add.bulk_enqueue([(3, 4), (5, 6)])
        assert _count(alias) == 3  # visible inside the caller's own transaction
        raise RuntimeError("the view failed")
    assert _count(alias) == 0


def test_enqueue_in_a_transaction_that_commits_leaves_the_row(alias: str) -> None:
    with transaction.atomic(using=alias):
        job = add.enqueue(1, 2)
        ids = add.bulk_enqueue([(3, 4)])
    assert set(Job.objects.using(alias).values_list("id", flat=True)) == {job.id, *ids}


def test_enqueue_in_a_rolled_back_savepoint_leaves_only_the_outer_row(alias: str) -> None:
    with transaction.atomic(using=alias):
        kept = add.enqueue(1, 2)
        with pytest.raises(RuntimeError), transaction.atomic(using=alias):
            add.enqueue(3, 4)
            raise RuntimeError("inner failure")
    assert list(Job.objects.using(alias).values_list("id", flat=True)) == [kept.id]


# -- .using() -------------------------------------------------------------------------------------


def test_using_returns_a_copy_and_leaves_the_registered_spec_alone(alias: str) -> None:
    before = (add.queue, add.priority, add.delay, add.run_at, add.max_attempts)
    changed = add.using(delay=timedelta(minutes=1), priority=5, queue="other", max_attempts=9)
    assert (changed.queue, changed.priority, changed.delay, changed.max_attempts) == (
        "other", 5, 60.0, 9)
    assert (add.queue, add.priority, add.delay, add.run_at, add.max_attempts) == before
    assert get_job("add") is add
    job = changed.enqueue(1, 2)
    plain = add.enqueue(3, 4)
    stored, other = row(alias, job.id), row(alias, plain.id)
    assert (stored.queue, stored.priority, stored.max_attempts) == ("other", 5, 9)
    assert (other.queue, other.priority, other.max_attempts) == ("default", 0, 3)
    # The delay is counted on the database clock at insert time.
    assert timedelta(seconds=55) < stored.visible_at - other.visible_at <= timedelta(seconds=60)


def test_a_delayed_job_is_invisible_until_due(cstore: JobStore, clock: FakeClock) -> None:
    (delayed,) = enqueue(cstore, new_job(delay=60))
    (at,) = enqueue(cstore, new_job(run_at=clock.now + timedelta(seconds=30)))
    assert claim(cstore) == []
    clock.advance(29.999)
    assert claim(cstore) == []
    clock.advance(0.001)
    assert [j.id for j in claim(cstore, timeout=3600)] == [at]
    clock.advance(29.999)
    assert claim(cstore) == []
    clock.advance(0.001)
    assert [j.id for j in claim(cstore)] == [delayed]


def test_a_run_at_between_two_milliseconds_is_never_due_early(cstore: JobStore,
                                                              clock: FakeClock) -> None:
    # SQLite's clock keeps milliseconds: a run_at 0.395 ms past one is due at the next, never
    # at the one before (a job must not start before its run_at on either engine).
    (at,) = enqueue(cstore, new_job(run_at=clock.now + timedelta(seconds=30, microseconds=395)))
    clock.advance(30)
    assert claim(cstore) == []
    clock.advance(0.001)
    assert [j.id for j in claim(cstore)] == [at]


@pytest.mark.parametrize("value", [1e16, -1.5e300])
def test_a_float_jsonb_would_change_is_refused_on_both_engines(cstore: JobStore, alias: str,
                                                               value: float) -> None:
    # jsonb would give 1e16 back as an int (and 1.5e300 as another number) while SQLite keeps
    # the float: refused at enqueue on both engines, before any row is written.
    from django_ultjobs.exceptions import JobArgumentError
    from tests.testapp.jobs import add

    with pytest.raises(JobArgumentError, match="floats of 1e16 or more"):
        add.enqueue(value, 1)
    assert not Job.objects.using(alias).exists()


@pytest.mark.parametrize("value", [9.999e15, 1.5e15, 0.30000000000000004, 1e-300, -2.5])
def test_floats_below_the_limit_come_back_as_the_same_float(cstore: JobStore,
                                                            value: float) -> None:
    enqueue(cstore, new_job(args=[value]))
    (got,) = claim(cstore)
    assert type(got.args[0]) is float and got.args[0] == value
