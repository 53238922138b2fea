"""The suite's flush between transactional tests (tests/testapp/management/commands/flush.py)
leaves both databases as Django's own flush does: every table empty but the content types and
permissions, which hold one row per model and permission, and on PostgreSQL every emptied table
as TRUNCATE leaves it (no pages, no statistics), so a test's query plans do not depend on the
tests before it."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.core.management.commands.flush import Command as DjangoFlush
from django.db import connections
from django.test.utils import override_settings

from tests.testapp.jobs import add
from tests.testapp.management.commands.flush import KEPT
from tests.testapp.models import RunLog

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def between_tests(alias: str) -> None:
    """The flush as a transactional test's teardown calls it."""
    call_command("flush", verbosity=0, interactive=False, database=alias,
                 reset_sequences=False, allow_cascade=False, inhibit_post_migrate=False)


def djangos_flush(alias: str) -> None:
    """Django's own flush, the one the suite's stands in for."""
    call_command(DjangoFlush(), verbosity=0, interactive=False, database=alias,
                 reset_sequences=False, allow_cascade=False, inhibit_post_migrate=False)


def kept_rows(alias: str) -> tuple[set[Any], set[Any]]:
    """The content types and permissions, without their ids (a full flush makes new ones)."""
    types = set(ContentType.objects.using(alias).values_list("app_label", "model"))
    perms = set(Permission.objects.using(alias).values_list(
        "content_type__app_label", "content_type__model", "codename", "name"))
    return types, perms


def tables(alias: str) -> list[str]:
    return connections[alias].introspection.django_table_names(only_existing=True,
                                                                include_views=False)


def not_as_truncated(alias: str) -> dict[str, tuple[int, int, float]]:
    """Every table, content types and permissions aside, that has rows, or on PostgreSQL pages
    or statistics (a truncated table has none)."""
    found = {}
    with connections[alias].cursor() as cur:
        for table in tables(alias):
            if table in KEPT:
                continue
            cur.execute(f"SELECT count(*) FROM {table}")
            (rows,) = cur.fetchone()
            size, stats = 0, -1.0
            if alias == "postgres":
                cur.execute("SELECT pg_relation_size(oid), reltuples FROM pg_class "
                            "WHERE relname = %s AND pg_table_is_visible(oid)", [table])
                size, stats = cur.fetchone()
            if rows or size or stats >= 0:
                found[table] = (rows, size, stats)
    return found


def write_everywhere(alias: str) -> None:
    with override_settings(ULTJOBS={"DATABASE": alias}):
        add.enqueue(1, 2)
    RunLog.objects.using(alias).create(job_id=1, attempt=1, pid=1, label="written")
    User.objects.db_manager(alias).create_user("someone")
    with connections[alias].cursor() as cur:
        cur.execute("ANALYZE django_session")  # statistics of an empty table


def test_between_tests_every_table_is_left_as_djangos_flush_leaves_it(alias: str) -> None:
    djangos_flush(alias)
    expected = kept_rows(alias)
    between_tests(alias)  # this process's full flush, if it has not made one yet
    write_everywhere(alias)
    assert not_as_truncated(alias)
    between_tests(alias)
    assert not_as_truncated(alias) == {}
    assert kept_rows(alias) == expected


def test_content_types_a_test_changed_are_made_again(alias: str) -> None:
    djangos_flush(alias)
    expected = kept_rows(alias)
    between_tests(alias)
    ContentType.objects.db_manager(alias).create(app_label="gone", model="oldmodel")
    Permission.objects.using(alias).filter(codename="view_job").update(name="renamed")
    User.objects.db_manager(alias).create_user("someone")
    between_tests(alias)
    assert kept_rows(alias) == expected
    assert not_as_truncated(alias) == {}
