"""Rule 109 (missing-tables-named): an enqueue on a database nobody migrated says so in one line, on
both engines, and the caller's transaction rolls back as it would for the driver's own error.

The job table is renamed inside the test's transaction (DDL is transactional on both engines),
so the database looks unmigrated to the enqueue and is whole again when the test rolls back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import DatabaseError, IntegrityError, connections, transaction

from django_ultjobs import JobTablesMissingError
from django_ultjobs.store import get_store
from tests.testapp.jobs import add, unique_touch
from tests.testapp.models import RunLog

pytestmark = pytest.mark.django_db(databases="__all__")

ENQUEUES: dict[str, Callable[[], Any]] = {
    "enqueue": lambda: add.enqueue(1, 2),
    "bulk_enqueue": lambda: add.bulk_enqueue([(1, 2), (3, 4)]),
    "a unique enqueue": lambda: unique_touch.enqueue("a"),
    "a unique bulk_enqueue": lambda: unique_touch.bulk_enqueue([("a",), ("b",)]),
}


def unmigrate(alias: str) -> None:
    """Take the job table away until the test's transaction rolls back."""
    with connections[alias].cursor() as cur:
        cur.execute("ALTER TABLE django_ultjobs_job RENAME TO ultjobs_test_job_away")


@pytest.mark.parametrize("enqueue", list(ENQUEUES.values()), ids=list(ENQUEUES))
def test_an_enqueue_before_migrate_says_run_migrate_in_one_line(
        alias: str, enqueue: Callable[[], Any]) -> None:
    unmigrate(alias)
    with pytest.raises(JobTablesMissingError) as caught, transaction.atomic(using=alias):
        enqueue()
    message = str(caught.value)
    flag = "" if alias == "default" else f" --database {alias}"
    assert message.startswith(f"the django_ultjobs tables do not exist in database {alias!r} ("), \
        message
    assert message.endswith(f"run `python manage.py migrate{flag}`"), message
    assert "\n" not in message
    # Still the database's error for code that catches those, with the driver's as its cause.
    assert isinstance(caught.value, DatabaseError)
    assert "django_ultjobs_job" in str(caught.value.__cause__)


def test_the_callers_transaction_rolls_back_with_it(alias: str) -> None:
    unmigrate(alias)
    with pytest.raises(JobTablesMissingError), transaction.atomic(using=alias):
        RunLog.objects.using(alias).create(job_id=0, attempt=0, pid=0, label="the view's write")
        add.enqueue(1, 2)
    assert not RunLog.objects.using(alias).filter(label="the view's write").exists()


def test_a_caller_that_catches_it_finds_its_transaction_as_the_driver_left_it(alias: str) -> None:
    # Not swallowed into a usable transaction: on PostgreSQL the failed INSERT aborted it, and
    # the next statement says so, exactly as after the driver's own "relation does not exist".
    unmigrate(alias)
    with transaction.atomic(using=alias):
        with pytest.raises(JobTablesMissingError):
            add.enqueue(1, 2)
        if connections[alias].vendor == "postgresql":
            with pytest.raises(DatabaseError, match="current transaction is aborted"):
                RunLog.objects.using(alias).count()
            transaction.set_rollback(True, using=alias)
        else:
            assert RunLog.objects.using(alias).count() == 0


def test_a_missing_table_of_the_sites_own_is_its_own_error(alias: str) -> None:
    store = get_store(alias)
    with pytest.raises(DatabaseError) as caught, transaction.atomic(using=alias), \
            store.tables_required(), connections[alias].cursor() as cur:
        cur.execute("SELECT * FROM shop_no_such_table")
    assert not isinstance(caught.value, JobTablesMissingError)
    with pytest.raises(IntegrityError) as caught, transaction.atomic(using=alias), \
            store.tables_required():
        RunLog.objects.using(alias).create(job_id=None, attempt=0, pid=0)  # NOT NULL
    assert not isinstance(caught.value, JobTablesMissingError)
