"""A django.tasks enqueue is seen by Django's query instrumentation, on both engines
(rule 41 (instrumented-statements))."""

from __future__ import annotations

from typing import Any

from django.db import connections, transaction
from django.test import TransactionTestCase
from django.test.utils import CaptureQueriesContext

from tests.tasks.taskdefs import add


def test_task_enqueue_is_one_query_that_every_hook_sees(alias: str) -> None:
    seen: list[str] = []

    def watch(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with (transaction.atomic(using=alias), connections[alias].execute_wrapper(watch),
          CaptureQueriesContext(connections[alias]) as ctx,
          TransactionTestCase().assertNumQueries(1, using=alias)):
        result = add.enqueue(1, 2)
    assert result.id
    assert len(ctx.captured_queries) == len(seen)
    assert len(seen) == 1 and "INSERT INTO django_ultjobs_job" in seen[0]
