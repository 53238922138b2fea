"""Rule 93 on PostgreSQL: a claim that is its own transaction commits without waiting for the
WAL flush; a claim inside a caller's transaction leaves that transaction's commit alone.

The flush is the largest part of an idle pickup (docs/performance.md). Skipping it is safe for
a claim alone: a claim a crash undoes leaves its job queued as it was, and the run that started
finds its lease gone at its next heartbeat, as a lapsed lease does (rule 2).
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
def _claim_params(alias: str) -> Iterator[list[dict[str, Any]]]:
    """The parameters every claim statement run on ``alias`` was sent with."""
    sent: list[dict[str, Any]] = []

    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool,
               context: dict[str, Any]) -> Any:
        if "django_ultjobs:claim" in sql:
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
