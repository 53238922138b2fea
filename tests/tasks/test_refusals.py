"""Rule 16 (bad-input-refused) through ``django.tasks``: bad arguments are ``TypeError``s naming the
argument, bad options the ``InvalidTask`` Django's API defines; nothing is written and the caller's
transaction lives on, on both engines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections, transaction
from django.test.utils import override_settings

from django_ultjobs import JobArgumentError, JobTablesMissingError
from django_ultjobs.models import Job
from django_ultjobs.tasks_backend.compat import InvalidTask
from tests.hostile import nested_list
from tests.tasks.settings import TASKS
from tests.tasks.taskdefs import add


def any_queue(attempt: Callable[[], Any]) -> Callable[[], Any]:
    """``attempt`` on a backend whose QUEUES is empty: Django then lets any queue name through,
    and the queue's own rules decide."""
    def run() -> Any:
        with override_settings(TASKS={**TASKS, "default": {**TASKS["default"], "QUEUES": []}}):
            return attempt()
    return run


REFUSALS: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("10,000 levels", lambda: add.enqueue(nested_list(10_000), 1), JobArgumentError,
     "argument 0 of tests.tasks.taskdefs.add() at [0][0]"),
    ("NUL in a keyword's name", lambda: add.enqueue(1, **{"b\x00": 2}), JobArgumentError,
     "argument 'b\\x00' of tests.tasks.taskdefs.add() has a name that contains a NUL"),
    ("a lone surrogate in a string", lambda: add.enqueue("k\udfff", 1), JobArgumentError,
     "argument 0 of tests.tasks.taskdefs.add() is a string that contains a lone surrogate"),
    ("10**5000", lambda: add.enqueue(10**5000, 1), JobArgumentError,
     "argument 0 of tests.tasks.taskdefs.add() is an int of more than 4300 digits"),
    ("a queue with NUL", any_queue(lambda: add.using(queue_name="a\x00b").enqueue(1, 2)),
     InvalidTask,
     "job 'tests.tasks.taskdefs.add': queue cannot contain a NUL character"),
    ("a queue of 101", any_queue(lambda: add.using(queue_name="q" * 101).enqueue(1, 2)),
     InvalidTask,
     "job 'tests.tasks.taskdefs.add': queue must be 1 to 100 characters"),
    ("a queue with a control character",
     any_queue(lambda: add.using(queue_name="a\x1bb").enqueue(1, 2)), InvalidTask,
     "job 'tests.tasks.taskdefs.add': queue cannot contain a character that is not printable"),
]


@pytest.mark.parametrize(("case", "attempt", "error", "message"), REFUSALS,
                         ids=[r[0] for r in REFUSALS])
def test_a_task_enqueue_the_queue_cannot_keep_is_refused_before_any_sql(
        alias: str, case: str, attempt: Callable[[], Any], error: type[Exception],
        message: str) -> None:
    # rule 16 (bad-input-refused)
    with transaction.atomic(using=alias):
        kept = add.enqueue(1, 2)
        with pytest.raises(error) as caught:
            attempt()
        also = add.enqueue(3, 4)
    assert str(caught.value).startswith(message), str(caught.value)
    if error is JobArgumentError:
        assert isinstance(caught.value, TypeError)  # what Django's own backends raise
    assert sorted(Job.objects.using(alias).values_list("id", flat=True)) == sorted(
        [int(kept.id), int(also.id)])


def test_a_task_enqueue_before_migrate_says_run_migrate(alias: str) -> None:
    # rule 109 (missing-tables-named): the table is taken away inside a transaction this test rolls
    # back.
    with transaction.atomic(using=alias):
        with connections[alias].cursor() as cur:
            cur.execute("ALTER TABLE django_ultjobs_job RENAME TO ultjobs_test_job_away")
        with pytest.raises(JobTablesMissingError, match=r"run `python manage\.py migrate"), \
                transaction.atomic(using=alias):
            add.enqueue(1, 2)
        transaction.set_rollback(True, using=alias)
    assert Job.objects.using(alias).count() == 0
