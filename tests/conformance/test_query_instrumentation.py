"""Django's query instrumentation sees the store's statements, on both engines
(rule 41 (instrumented-statements)).

``assertNumQueries``, ``CaptureQueriesContext`` and ``connection.execute_wrapper`` (the hook
django-debug-toolbar, Sentry and APM agents use) must see every statement the store sends: the
enqueue inside the caller's transaction, and the worker's claim, heartbeat, settle and slot
statements alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connections, transaction
from django.db.backends.utils import CursorWrapper
from django.test import TransactionTestCase
from django.test.utils import CaptureQueriesContext

from django_ultjobs import bulk_enqueue
from django_ultjobs.store import JobStore
from tests.testapp.jobs import add, noop

from .helpers import claim, enqueue, settlement

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

_TAG = re.compile(r"/\* django_ultjobs:(?P<name>[a-z_]+) \*/")


def _names(sqls: list[str]) -> list[str]:
    """The named queries among ``sqls``, in order (other statements: BEGIN, COMMIT, ...)."""
    return [m.group("name") for sql in sqls if (m := _TAG.search(sql))]


@contextmanager
def _wrapped(alias: str) -> Iterator[list[str]]:
    """Every statement ``connection.execute_wrapper`` sees on ``alias``, as a tool would."""
    seen: list[str] = []

    def watch(execute: Callable[..., Any], sql: str, params: Any, many: bool,
              context: dict[str, Any]) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connections[alias].execute_wrapper(watch):
        yield seen


def test_assert_num_queries_counts_one_statement_per_enqueue(alias: str) -> None:
    case = TransactionTestCase()
    with transaction.atomic(using=alias):
        with case.assertNumQueries(1, using=alias):
            noop.enqueue()
        with case.assertNumQueries(1, using=alias):
            bulk_enqueue([add.call(1, 2), noop.call(), add.call(3, 4)])
        with case.assertNumQueries(1, using=alias):
            add.bulk_enqueue([(5, 6), (7, 8)])


def test_captured_queries_show_the_insert(alias: str) -> None:
    with transaction.atomic(using=alias), CaptureQueriesContext(connections[alias]) as ctx:
        job = add.enqueue(1, 2)
        ids = bulk_enqueue([add.call(3, 4), noop.call()])
    names = _names([q["sql"] for q in ctx.captured_queries])
    assert len(names) == len(ctx.captured_queries) == 2
    assert names[0].startswith("enqueue") and names[1] == "enqueue"
    assert all("INSERT INTO django_ultjobs_job" in q["sql"] for q in ctx.captured_queries)
    assert job.pk and len(ids) == 2


def test_execute_wrapper_sees_enqueue(alias: str) -> None:
    with transaction.atomic(using=alias), _wrapped(alias) as seen:
        add.enqueue(1, 2)
        bulk_enqueue([add.call(3, 4), noop.call()])
    assert len(_names(seen)) == 2 and all("INSERT INTO" in sql for sql in seen)


def test_the_workers_statements_are_seen(cstore: JobStore) -> None:
    # Rule 41 (instrumented-statements) holds for the hot worker statements too: none bypasses the
    # wrappers.
    enqueue(cstore)
    alias = cstore.alias
    with _wrapped(alias) as seen, CaptureQueriesContext(connections[alias]) as ctx:
        (job,) = claim(cstore)
        assert cstore.heartbeat([(job.id, job.token)], 30.0) == {job.id: False}
        held = cstore.acquire("k", 1, 30.0, "holder")
        assert held is not None and cstore.renew(held, 30.0)
        cstore.release(held)
        assert cstore.settle([settlement(job)], "w1") == {job.id}
        cstore.worker_upsert("w1", "host", 1, 1, ["default"])
        cstore.worker_touch("w1", 0)
    names = _names(seen)
    for name in ("heartbeat", "slot_acquire", "slot_renew", "slot_release", "settle",
                 "worker_upsert", "worker_touch"):
        assert name in names, (name, names)
    assert any(name.startswith("claim") for name in names)
    assert _names([q["sql"] for q in ctx.captured_queries]) == names


def test_a_tool_that_wraps_connection_cursor_sees_enqueue(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # As django-debug-toolbar and ddtrace do: replace connection.cursor() with one that returns
    # their own wrapper class around Django's cursor.
    conn = connections[alias]
    seen: list[str] = []
    django_cursor = conn.cursor

    class ToolCursor(CursorWrapper):
        def execute(self, sql: str, params: Any = None) -> Any:
            seen.append(sql)
            return super().execute(sql, params)

    def tool_cursor() -> Any:
        return ToolCursor(django_cursor().cursor, conn)

    monkeypatch.setattr(conn, "cursor", tool_cursor)
    with transaction.atomic(using=alias):
        add.enqueue(1, 2)
        bulk_enqueue([add.call(3, 4), noop.call()])
    ours = [sql for sql in seen if _TAG.search(sql)]  # Django's atomic() sends BEGIN on SQLite
    assert len(ours) == 2 and all("INSERT INTO" in sql for sql in ours)
