"""``flush`` for the suite's transactional tests: the end state of Django's, for less work.

After each ``transaction=True`` test Django empties every table of both test databases, then
re-creates every app's content types and permissions (``post_migrate``). That was most of a
test's time for the suite's quick tests: PostgreSQL's TRUNCATE of a table costs milliseconds,
whether the test wrote to it or not. So this flush

- leaves the content types and permissions alone when they hold exactly the rows the last full
  flush left, which the re-creation would put back (under new ids); any other rows (a test that
  added, renamed or removed one) get Django's full flush, ``post_migrate`` included;
- on PostgreSQL, truncates only the tables a test wrote to or analyzed (a heap of any size, or
  statistics): any other table is already as TRUNCATE leaves one (no pages, never analyzed), so
  the planner sees the same tables either way.

The command line's ``manage.py flush`` (interactive, or resetting sequences) is Django's own.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management.color import no_style
from django.core.management.commands import flush
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

KEPT = (ContentType._meta.db_table, Permission._meta.db_table)
#: Per database alias: the kept tables' rows just after this process's last full flush.
_AFTER_FULL_FLUSH: dict[str, tuple[list[Any], ...]] = {}

# The tables (of those named) that are not as TRUNCATE leaves one. A truncated table has no
# pages and reltuples -1; ANALYZE or VACUUM sets reltuples, even of an empty table.
_WRITTEN_SQL = """
    SELECT c.relname FROM pg_class c
    WHERE c.relname = ANY(%s) AND pg_table_is_visible(c.oid)
      AND (pg_relation_size(c.oid) > 0 OR c.reltuples >= 0)
"""


class Command(flush.Command):
    def handle(self, **options: Any) -> None:
        if options["interactive"] or options.get("reset_sequences", True):
            super().handle(**options)
            return
        database = options["database"]
        connection = connections[database]
        keep: tuple[str, ...] = ()
        if not options.get("inhibit_post_migrate"):
            if _kept_rows(connection) != _AFTER_FULL_FLUSH.get(database):
                super().handle(**options)
                _AFTER_FULL_FLUSH[database] = _kept_rows(connection)
                return
            keep = KEPT
        tables = [t for t in connection.introspection.django_table_names(
            only_existing=True, include_views=False) if t not in keep]
        postgres = connection.vendor == "postgresql"
        tables = _written(connection, tables)
        if tables:
            # CASCADE: a table a written one's rows may be referenced from is emptied with it
            # (it is empty already, or written and listed).
            connection.ops.execute_sql_flush(connection.ops.sql_flush(
                no_style(), tables, allow_cascade=postgres or options.get("allow_cascade")))


def _kept_rows(connection: BaseDatabaseWrapper) -> tuple[list[Any], ...]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, app_label, model FROM {KEPT[0]} ORDER BY id")
        types = cursor.fetchall()
        cursor.execute(f"SELECT id, content_type_id, codename, name FROM {KEPT[1]} ORDER BY id")
        return types, cursor.fetchall()


def _written(connection: BaseDatabaseWrapper, tables: list[str]) -> list[str]:
    """The tables (of ``tables``) a flush has to empty; the others are as it would leave them."""
    if not tables:
        return []
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_WRITTEN_SQL, [tables])
        else:
            # DELETE, SQLite's flush, leaves an empty table as it is.
            quote = connection.ops.quote_name
            cursor.execute(" UNION ALL ".join(
                f"SELECT %s WHERE EXISTS (SELECT 1 FROM {quote(t)})" for t in tables), tables)
        written = {name for (name,) in cursor.fetchall()}
    return [t for t in tables if t in written]
