"""The queue's migrations on both engines: what an upgrade leaves behind, and the way back."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connections

from django_ultjobs.models import JobAttempt

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def _indexes_on(alias: str, columns: list[str]) -> list[str]:
    connection = connections[alias]
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, JobAttempt._meta.db_table)
    return sorted(name for name, c in constraints.items()
                  if c["index"] and not c["primary_key"] and c["columns"] == columns)


def test_an_attempt_row_is_indexed_by_job_once(alias: str) -> None:
    # 0005: (job, attempt) serves every lookup by job; the foreign key's own index on job alone
    # was a second index write per attempt row on every settle.
    assert _indexes_on(alias, ["job_id"]) == []
    assert _indexes_on(alias, ["job_id", "attempt"]) == ["ultjobs_attempt_job"]
    try:
        call_command("migrate", "django_ultjobs", "0004", database=alias, verbosity=0)
        # Going back restores the index Django made for the foreign key...
        assert len(_indexes_on(alias, ["job_id"])) == 1
        call_command("migrate", "django_ultjobs", database=alias, verbosity=0)
        # ...and the upgrade drops exactly that one (concurrently on PostgreSQL).
        assert _indexes_on(alias, ["job_id"]) == []
        assert _indexes_on(alias, ["job_id", "attempt"]) == ["ultjobs_attempt_job"]
    finally:
        call_command("migrate", "django_ultjobs", database=alias, verbosity=0)
