"""Rule 93 (unflushed-slot-release) on PostgreSQL: a slot release that is its own transaction
commits without waiting for the WAL flush; a claim always waits for it; inside a caller's
transaction, or on a connection with autocommit off, neither touches the commit's setting.

A release a crash undoes leaves the slot to lapse on its TTL (rule 9 (slot-held-while-body-runs)):
the cap is under-used for that long, never exceeded. A claim a crash undid would put its job back in
the queue while the run that had started still executes, so a second worker could start it
(rule 1 (leased-claim)'s "never twice at the same time"): claims keep the server's setting.
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
def _sent(alias: str, query: str) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """The SQL and parameters of every ``query`` statement run on ``alias``."""
    sent: list[tuple[str, dict[str, Any]]] = []

    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool,
               context: dict[str, Any]) -> Any:
        if f"django_ultjobs:{query}" in sql:
            sent.append((sql, dict(params)))
        return execute(sql, params, many, context)

    with connections[alias].execute_wrapper(record):
        yield sent


def test_a_claim_waits_for_the_flush(pg_alias: str) -> None:
    store = get_store(pg_alias)
    enqueue(store, new_job(), new_job())
    with _sent(pg_alias, "claim") as sent:
        assert len(claim(store, limit=1)) == 1
        with transaction.atomic(using=pg_alias):
            assert len(claim(store, limit=1)) == 1
            assert _setting(pg_alias) == "on"
    assert len(sent) == 2
    assert all("synchronous_commit" not in sql and "commit_mode" not in params
               for sql, params in sent)


def test_a_slot_release_of_its_own_waits_for_no_flush_and_in_a_transaction_changes_nothing(
        pg_alias: str) -> None:
    store = get_store(pg_alias)
    first, second = store.acquire("job:k", 2, 30, "h1"), store.acquire("job:k", 2, 30, "h2")
    assert first is not None and second is not None
    with _sent(pg_alias, "slot_release") as sent:
        store.release(first)
        with transaction.atomic(using=pg_alias):
            store.release(second)
            assert _setting(pg_alias) == "on"
    assert [params["commit_mode"] for _, params in sent] == ["off", None]
    # set_config(..., true) lasted to the end of the release's own transaction, no further.
    assert _setting(pg_alias) == "on"
    assert store.acquire("job:k", 2, 30, "h3") is not None  # both slots free again
    assert store.acquire("job:k", 2, 30, "h4") is not None


def test_the_release_statement_turns_the_flush_off_only_when_asked(pg_alias: str) -> None:
    """What the parameter does, read inside the release's transaction before it commits."""
    store = get_store(pg_alias)
    seen = []
    for asked in ("off", None):
        hold = store.acquire("job:m", 1, 30, "h")
        assert hold is not None
        with transaction.atomic(using=pg_alias):
            # In a caller's transaction the store asks for nothing; force the question.
            store.commit_mode = lambda asked=asked: asked  # type: ignore[method-assign]
            store.release(hold)
            seen.append(_setting(pg_alias))
    assert seen == ["off", "on"]


def test_with_autocommit_off_a_release_leaves_the_callers_commit_alone(pg_alias: str) -> None:
    store = get_store(pg_alias)
    hold = store.acquire("job:n", 1, 30, "h")
    assert hold is not None
    conn = connections[pg_alias]
    conn.set_autocommit(False)
    try:
        with _sent(pg_alias, "slot_release") as sent:
            store.release(hold)
        # The release opened the caller's transaction: its commit keeps the session's setting.
        assert _setting(pg_alias) == "on"
        conn.commit()
    finally:
        conn.set_autocommit(True)
    assert [params["commit_mode"] for _, params in sent] == [None]
