"""Rule 93 on PostgreSQL: a claim or a slot release that is its own transaction commits without
waiting for the WAL flush; inside a caller's transaction it leaves that transaction's commit alone.

The flush is the largest part of an idle pickup (docs/performance.md). Skipping it is safe for
these two alone: a claim a crash undoes leaves its job queued as it was, and the run that started
finds its lease gone at its next heartbeat (rule 3); a release a crash undoes leaves the slot to
lapse on its TTL (rule 9).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connections, transaction

from django_ultjobs.store import get_store

from .helpers import claim, enqueue, new_job

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


def _setting(alias: str) -> str:
    with connections[alias].cursor() as cur:
        cur.execute("SHOW synchronous_commit")
        return cur.fetchone()[0]


@contextmanager
def _claim_params(alias: str, query: str = "claim") -> Iterator[list[dict[str, Any]]]:
    """The parameters every ``query`` statement (``claim``: either claim) run on ``alias`` was
    sent with."""
    sent: list[dict[str, Any]] = []

    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool,
               context: dict[str, Any]) -> Any:
        if f"django_ultjobs:{query}" in sql:
            sent.append(dict(params))
        return execute(sql, params, many, context)

    with connections[alias].execute_wrapper(record):
        yield sent


def test_a_claim_of_its_own_asks_for_an_asynchronous_commit_that_ends_with_it(
        pg_alias: str) -> None:
    store = get_store(pg_alias)
    enqueue(store, new_job())
    with _claim_params(pg_alias) as sent:
        batch = claim(store)
    assert len(batch) == 1
    assert [p["commit_mode"] for p in sent] == ["off"]
    # set_config(..., true) lasted to the end of the claim's own transaction, no further.
    assert _setting(pg_alias) == "on"


def test_the_claim_statement_turns_the_flush_off_only_when_asked(pg_alias: str) -> None:
    """What the parameter does, read inside the claim's transaction before it commits."""
    store = get_store(pg_alias)
    enqueue(store, new_job(), new_job())
    seen = []
    for asked in (True, False):
        with transaction.atomic(using=pg_alias):
            with _claim_params(pg_alias) as sent:
                # In a caller's transaction the store asks for nothing; force the question.
                store.in_callers_transaction = lambda conn, asked=asked: not asked  # type: ignore
                claim(store, limit=1)
            seen.append((sent[0]["commit_mode"], _setting(pg_alias)))
    assert seen == [("off", "off"), (None, "on")]


def test_a_claim_inside_a_callers_transaction_leaves_its_commit_alone(pg_alias: str) -> None:
    store = get_store(pg_alias)
    enqueue(store, new_job())
    with transaction.atomic(using=pg_alias):
        with _claim_params(pg_alias) as sent:
            batch = claim(store)
        assert _setting(pg_alias) == "on"
    assert len(batch) == 1
    assert [p["commit_mode"] for p in sent] == [None]


def test_a_slot_release_of_its_own_waits_for_no_flush_and_in_a_transaction_changes_nothing(
        pg_alias: str) -> None:
    store = get_store(pg_alias)
    first, second = store.acquire("job:k", 2, 30, "h1"), store.acquire("job:k", 2, 30, "h2")
    assert first is not None and second is not None
    with _claim_params(pg_alias, "slot_release") as sent:
        store.release(first)
        with transaction.atomic(using=pg_alias):
            store.release(second)
            assert _setting(pg_alias) == "on"
    assert [p["commit_mode"] for p in sent] == ["off", None]
    assert _setting(pg_alias) == "on"
    assert store.acquire("job:k", 2, 30, "h3") is not None  # both slots free again
    assert store.acquire("job:k", 2, 30, "h4") is not None
