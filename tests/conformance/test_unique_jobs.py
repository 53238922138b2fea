"""Unique jobs on both engines (rules 65 (one-key-holder) to 69 (unique-in-transaction)): one holder
per key, the holder returned, the throttle window on the database's clock, bulk batches, the
caller's transaction."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from django_ultjobs import bulk_enqueue, job
from django_ultjobs.exceptions import JobOptionError
from django_ultjobs.jobs.spec import JobSpec
from django_ultjobs.jobs.unique import args_digest, key_of
from django_ultjobs.models import Job
from django_ultjobs.store import JobStore
from django_ultjobs.testing import unregister
from tests.doubles import FakeClock
from tests.testapp.jobs import add, throttled_touch, unique_touch

from .helpers import claim, settlement

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


@pytest.fixture
def clocked(alias: str, cstore: JobStore, monkeypatch: pytest.MonkeyPatch) -> JobStore:
    """Every enqueue of the test goes through ``cstore``, which reads the injected clock."""
    monkeypatch.setattr("django_ultjobs.jobs.enqueue.get_store", lambda alias=None: cstore)
    return cstore


def finish(store: JobStore, job_id: int, status: str = "succeeded") -> None:
    """Claim ``job_id`` (the only runnable job) and settle it as ``status``."""
    (claimed,) = [c for c in claim(store, limit=50) if c.id == job_id]
    outcome = "succeeded" if status == "succeeded" else "failed"
    assert store.settle([settlement(claimed, status, outcome=outcome)], "w1") == {job_id}


# -- the key of a call ------------------------------------------------------------------------


def test_a_call_is_keyed_by_its_bound_arguments_with_defaults() -> None:
    # rule 65 (one-key-holder): f(x), f(label=x) and f(x, pause=0.0) are one call; the key is per
    # arguments.
    one = key_of(unique_touch, ("a",), {})
    assert one == key_of(unique_touch, (), {"label": "a"})
    assert one == key_of(unique_touch, ("a", 0.0), {})
    assert one != key_of(unique_touch, ("b",), {})
    assert one != key_of(unique_touch, ("a", 1.0), {})
    assert one.startswith("args:") and len(one) == 5 + 64
    # Sorted keys: a dict argument keyed the same whatever its order.
    spec = JobSpec(func=lambda payload: None, name="t_dict", unique=True)
    assert args_digest(spec, ({"a": 1, "b": 2},), {}) == args_digest(spec, ({"b": 2, "a": 1},), {})


def test_a_job_that_is_not_unique_has_no_key_and_an_explicit_key_wins() -> None:
    assert key_of(add, (1, 2), {}) is None
    assert key_of(add.using(unique_key="sum"), (1, 2), {}) == "sum"
    assert key_of(unique_touch.using(unique_key="mine"), ("a",), {}) == "mine"
    assert throttled_touch.unique_for == 60.0
    assert key_of(throttled_touch, ("a",), {}).startswith("args:")


@pytest.mark.parametrize(("options", "words"), [
    ({"unique_key": ""}, "unique_key must be 1 to 200 characters"),
    ({"unique_key": "x" * 201}, "unique_key must be 1 to 200 characters"),
    ({"unique_key": 5}, "unique_key must be 1 to 200 characters"),
    ({"unique_key": "a\x00b"}, "NUL"),
    ({"unique_key": "a\udfffb"}, "lone surrogate"),
])
def test_a_bad_unique_key_is_refused_by_using(options: dict[str, Any], words: str) -> None:
    # rule 16 (bad-input-refused): refused where it is given, naming the option, before any SQL.
    with pytest.raises(JobOptionError, match=words):
        add.using(**options)


@pytest.mark.parametrize(("options", "words"), [
    ({"unique_for": math.nan}, "unique_for must be a finite number"),
    ({"unique_for": -1}, "unique_for must be a finite number"),
    ({"unique_for": math.inf}, "unique_for must be a finite number"),
    ({"unique_for": 1e13}, "unique_for must be a finite number"),
    ({"unique_for": True}, "unique_for must be a number of seconds"),
    ({"unique_for": "60"}, "unique_for must be a number of seconds"),
    ({"unique": "yes"}, "unique must be True or False"),
])
def test_bad_unique_options_are_refused_at_the_decorator(options: dict[str, Any],
                                                         words: str) -> None:
    with pytest.raises(JobOptionError, match=words):
        job(name="t_bad_unique", **options)(lambda: None)
    unregister("t_bad_unique")


def test_a_unique_job_whose_default_is_not_json_is_refused_at_the_decorator() -> None:
    def body(when: object = object()) -> None: ...

    with pytest.raises(JobOptionError, match="parameter 'when' defaults to"):
        job(name="t_bad_default", unique=True)(body)
    unregister("t_bad_default")


def test_unique_for_takes_a_timedelta() -> None:
    spec = job(name="t_td", unique_for=timedelta(minutes=2))(lambda: None)
    unregister("t_td")
    assert spec.unique_for == 120.0


# -- one holder per key -----------------------------------------------------------------------


def test_enqueue_returns_the_job_holding_the_key_while_it_is_queued(alias: str) -> None:
    # rules 65 (one-key-holder), 66 (held-key-returns-holder)
    first = unique_touch.enqueue("a")
    again = unique_touch.enqueue(label="a")
    other = unique_touch.enqueue("b")
    assert again.id == first.id and again.status == "queued"
    assert other.id != first.id
    assert Job.objects.using(alias).filter(name="unique_touch").count() == 2
    created = unique_touch.enqueue_or_existing("a")
    assert created[0].id == first.id and created[1] is False


def test_running_and_waiting_jobs_hold_their_key(alias: str, clocked: JobStore) -> None:
    first = unique_touch.enqueue("a")
    (claimed,) = claim(clocked)
    assert unique_touch.enqueue("a").id == first.id  # running
    clocked.settle([settlement(claimed, "waiting", outcome=None, delay=60)], "w1")
    assert Job.objects.using(alias).get(id=first.id).status == "waiting"
    assert unique_touch.enqueue("a").id == first.id  # waiting


@pytest.mark.parametrize("status", ["succeeded", "failed"])
def test_a_finished_job_gives_its_key_to_the_next_enqueue(alias: str, clocked: JobStore,
                                                          status: str) -> None:
    # rule 66 (held-key-returns-holder): once it has finished, a new one is created, and the old row
    # lets go of the key.
    first = unique_touch.enqueue("a")
    finish(clocked, first.id, status)
    second = unique_touch.enqueue("a")
    assert second.id != first.id
    rows = dict(Job.objects.using(alias).filter(name="unique_touch").values_list("id",
                                                                                "unique_key"))
    assert rows == {first.id: None, second.id: second.unique_key}
    assert unique_touch.enqueue("a").id == second.id


def test_a_cancelled_job_gives_its_key_up(alias: str) -> None:
    from django_ultjobs.operations import cancel_jobs

    first = unique_touch.enqueue("a")
    cancel_jobs([first.id])
    assert unique_touch.enqueue("a").id != first.id


def test_keys_are_per_job_name(alias: str) -> None:
    one = add.using(unique_key="k").enqueue(1, 2)
    two = unique_touch.using(unique_key="k").enqueue("x")
    assert one.id != two.id
    assert add.using(unique_key="k").enqueue(5, 5).id == one.id
    # The existing job is returned as it is: the new call's arguments and options are dropped.
    assert add.using(unique_key="k", priority=9).enqueue(5, 5).args == [1, 2]


# -- unique_for: the throttle -----------------------------------------------------------------


def test_unique_for_keeps_the_key_held_after_the_job_finished(alias: str, clock: FakeClock,
                                                              clocked: JobStore) -> None:
    # rule 67 (unique-for-window): finished less than unique_for seconds ago (database clock) still
    # holds.
    first = throttled_touch.enqueue("a")
    finish(clocked, first.id)
    clock.advance(59)
    assert throttled_touch.enqueue("a").id == first.id
    clock.advance(1.5)
    second = throttled_touch.enqueue("a")
    assert second.id != first.id
    assert Job.objects.using(alias).get(id=first.id).unique_key is None


def test_the_window_is_the_holders_own(alias: str, clock: FakeClock, clocked: JobStore) -> None:
    # A row keeps the unique_for it was enqueued with: a key given by .using() to a job with
    # no window is free as soon as it finished.
    first = add.using(unique_key="k").enqueue(1, 2)
    finish(clocked, first.id)
    assert add.using(unique_key="k").enqueue(1, 2).id != first.id


# -- bulk_enqueue -----------------------------------------------------------------------------


def test_bulk_enqueue_with_duplicates_in_the_batch_and_against_the_table(alias: str) -> None:
    # rule 68 (bulk-unique-in-order)
    held = unique_touch.enqueue("held")
    ids = bulk_enqueue([
        add.call(1, 1),
        unique_touch.call("a"),
        unique_touch.call("held"),
        add.call(2, 2),
        unique_touch.call(label="a"),
        unique_touch.call("b"),
        add.call(3, 3),
    ])
    assert ids[2] == held.id
    assert ids[1] == ids[4]
    assert len(set(ids)) == 6
    rows = {j.id: j for j in Job.objects.using(alias).all()}
    assert len(rows) == 6
    assert [rows[i].args for i in (ids[0], ids[3], ids[6])] == [[1, 1], [2, 2], [3, 3]]
    assert rows[ids[5]].args == ["b"]
    # The calls without a key keep their order of ids.
    assert ids[0] < ids[3] < ids[6]


def test_bulk_enqueue_of_keys_whose_holders_expired(alias: str, clock: FakeClock,
                                                    clocked: JobStore) -> None:
    first = throttled_touch.enqueue("a")
    finish(clocked, first.id)
    assert throttled_touch.bulk_enqueue([("a",), ("a",)]) == [first.id, first.id]
    clock.advance(61)
    ids = throttled_touch.bulk_enqueue([("a",), ("a",), ("c",)])
    assert ids[0] == ids[1] != first.id
    assert Job.objects.using(alias).filter(name="throttled_touch").count() == 3


# -- the caller's transaction ------------------------------------------------------------------


def test_a_rolled_back_enqueue_holds_no_key(alias: str) -> None:
    # rule 69 (unique-in-transaction)
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        unique_touch.enqueue("a")
        raise RuntimeError
    assert not Job.objects.using(alias).exists()
    with transaction.atomic(using=alias):
        kept = unique_touch.enqueue("a")
        with pytest.raises(RuntimeError), transaction.atomic(using=alias):
            assert unique_touch.enqueue("a").id == kept.id  # its own transaction's row
            inner = unique_touch.enqueue("b")
            raise RuntimeError
        # The savepoint rolled back took "b" with it; "a" is still held, by the outer row.
        again = unique_touch.enqueue("b")
        assert again.id != inner.id
        assert unique_touch.enqueue("a").id == kept.id
    assert Job.objects.using(alias).count() == 2


def test_a_duplicate_leaves_the_callers_transaction_usable(alias: str) -> None:
    # No unique violation is ever raised (on PostgreSQL it would abort the whole transaction).
    with transaction.atomic(using=alias):
        first = unique_touch.enqueue("a")
        assert unique_touch.enqueue("a").id == first.id
        assert bulk_enqueue([unique_touch.call("a"), add.call(1, 2)])[0] == first.id
        assert Job.objects.using(alias).count() == 2


# -- statements --------------------------------------------------------------------------------


@pytest.fixture
def queries(alias: str) -> Iterator[CaptureQueriesContext]:
    with CaptureQueriesContext(connections[alias]) as captured:
        yield captured


def test_a_keyed_enqueue_is_one_statement_and_a_duplicate_two(alias: str) -> None:
    # rule 41 (instrumented-statements) with rule 66 (held-key-returns-holder): inserting is one
    # statement; answering with the holder adds the read of it (on SQLite also the release of
    # expired holders, which found none).
    with CaptureQueriesContext(connections[alias]) as new:
        unique_touch.enqueue("a")
    assert len(new.captured_queries) == 1
    with CaptureQueriesContext(connections[alias]) as duplicate:
        unique_touch.enqueue("a")
    expected = 2 if connections[alias].vendor == "postgresql" else 3
    assert len(duplicate.captured_queries) == expected
    assert all("django_ultjobs" in q["sql"] or "unique_key" in q["sql"]
               for q in duplicate.captured_queries)


def test_taking_an_expired_key_over_is_one_statement_on_postgresql(alias: str,
                                                                    clocked: JobStore) -> None:
    first = unique_touch.enqueue("a")
    finish(clocked, first.id)
    with CaptureQueriesContext(connections[alias]) as taken:
        assert unique_touch.enqueue("a").id != first.id
    # PostgreSQL releases and inserts in one statement; SQLite inserts, releases, inserts.
    expected = 1 if connections[alias].vendor == "postgresql" else 3
    assert len(taken.captured_queries) == expected


def test_a_keyed_enqueue_keeps_the_jobs_cap_key(alias: str) -> None:
    # rules 50 (per-key-cap) and 66 (held-key-returns-holder): a job capped per key keeps its slot
    # key when it also holds a unique key, alone and in a batch, or its runs would be capped per job
    # instead.
    from tests.testapp.jobs import keyed_clocked

    expected = keyed_clocked.slot_key_of(("acme",), {})
    one = keyed_clocked.using(unique_key="export:acme").enqueue("acme")
    ids = bulk_enqueue([keyed_clocked.using(unique_key="export:bolt").call("acme"),
                        keyed_clocked.using(unique_key="export:cato").call("acme")])
    rows = Job.objects.using(alias).filter(id__in=[one.id, *ids])
    assert expected and [r.concurrency_key for r in rows] == [expected] * 3
    assert one.concurrency_key == expected
