"""Migration operations that keep a busy job table writable while they run, and the one that
runs changes to the job and attempt tables with the attempts view out of the way."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from . import attempt_view


class AddIndexConcurrently(migrations.AddIndex):
    """``AddIndex`` that builds the index with ``CREATE INDEX CONCURRENTLY`` on PostgreSQL.

    A plain ``CREATE INDEX`` holds a lock that blocks every insert and update of the table while
    it reads the whole heap: on a job table with millions of finished rows that is every
    ``enqueue()`` of the site and every claim of the fleet waiting for seconds. SQLite has no such
    option (and one writer anyway), so it gets the plain form. The migration must set
    ``atomic = False``: PostgreSQL refuses CONCURRENTLY inside a transaction. A concurrent build
    waits for every transaction open when it starts, so a long-running transaction elsewhere makes
    the migration wait for it.
    """

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        _drop_if_exists(schema_editor, self.index.name)
        schema_editor.add_index(model, self.index, **_concurrently(schema_editor))

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            _drop_if_exists(schema_editor, self.index.name)


class RemoveIndexConcurrently(migrations.RemoveIndex):
    """``RemoveIndex`` that drops the index with ``DROP INDEX CONCURRENTLY`` on PostgreSQL.

    A plain ``DROP INDEX`` waits for every transaction on the table and holds up every statement
    behind it meanwhile (on a queue table: the fleet's claims and settles). SQLite gets the plain
    form. The migration must set ``atomic = False``. Going backwards builds the index again,
    concurrently on PostgreSQL.
    """

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        model = from_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        _drop_if_exists(schema_editor, self.name)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        index = to_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
        _drop_if_exists(schema_editor, index.name)
        schema_editor.add_index(model, index, **_concurrently(schema_editor))


class AddUniqueConstraintConcurrently(migrations.AddConstraint):
    """``AddConstraint`` of a ``UniqueConstraint`` built as ``CREATE UNIQUE INDEX CONCURRENTLY``
    on PostgreSQL, for the reason ``AddIndexConcurrently`` gives; SQLite gets the plain form.

    PostgreSQL keeps a unique constraint with a condition as a unique index, which is what the
    statement builds (``ON CONFLICT`` infers it the same). The migration must set
    ``atomic = False``.
    """

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        _drop_if_exists(schema_editor, self.constraint.name)
        sql = str(self.constraint.create_sql(model, schema_editor))
        if schema_editor.connection.vendor == "postgresql":
            sql = sql.replace("CREATE UNIQUE INDEX", "CREATE UNIQUE INDEX CONCURRENTLY", 1)
        schema_editor.execute(sql)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            _drop_if_exists(schema_editor, self.constraint.name)


class DropForeignKeyConstraint(migrations.AlterField):
    """``AlterField`` of a foreign key to ``db_constraint=False``: PostgreSQL drops the
    constraint, SQLite's table keeps it.

    PostgreSQL checks a foreign key with a trigger per row deleted from the referenced table,
    each running a query of its own: the job table's two children (attempts, steps) made
    deleting a finished job three times as slow as the delete itself. Dropping one is a change
    to the catalog alone (``ALTER TABLE ... DROP CONSTRAINT``, no row read, no view in the way),
    though it waits for the transactions open on both tables when it starts; it is skipped when
    the constraint is gone already (a re-run after an interrupted migrate). SQLite checks a
    foreign key inside the statement, an index probe, and would rebuild the whole table to drop
    one: its tables keep theirs until a later change rebuilds them from the model. Going
    backwards adds the constraint again on PostgreSQL, reading both tables to validate it.
    """

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        table = model._meta.db_table
        column = model._meta.get_field(self.name).column
        with schema_editor.connection.cursor() as cur:
            found = schema_editor.connection.introspection.get_constraints(cur, table)
        for name, constraint in found.items():
            if constraint["foreign_key"] and constraint["columns"] == [column]:
                schema_editor.execute(f"ALTER TABLE {schema_editor.quote_name(table)} "
                                      f"DROP CONSTRAINT IF EXISTS {schema_editor.quote_name(name)}")

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        # AlterField's own way back (its forwards between the states it is given, which
        # Django passes in the backwards order), not this class's forwards.
        if schema_editor.connection.vendor == "postgresql":
            migrations.AlterField.database_forwards(self, app_label, schema_editor, from_state,
                                                    to_state)


def _drop_if_exists(schema_editor: Any, name: str) -> None:
    """Drop index ``name`` if it is there: concurrently on PostgreSQL, plainly on SQLite.

    With ``atomic = False`` each operation commits on its own, so a migration interrupted
    between two of them (a killed deploy) is run again from its first one: the index that
    operation builds may already exist (on PostgreSQL perhaps INVALID, from a failed concurrent
    build), and the index a removal drops may already be gone.
    """
    concurrently = " CONCURRENTLY" if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(f"DROP INDEX{concurrently} IF EXISTS {schema_editor.quote_name(name)}")


def _concurrently(schema_editor: Any) -> dict[str, bool]:
    return {"concurrently": True} if schema_editor.connection.vendor == "postgresql" else {}


class DropFieldIndexConcurrently(migrations.AlterField):
    """``AlterField`` that turns a field's ``db_index`` off, dropping its index concurrently.

    The plain ``AlterField`` drops the index with ``DROP INDEX`` in the migration's transaction,
    whose lock waits for every transaction on the table and holds up every statement behind it
    meanwhile (on a queue table: every settle of the fleet); on SQLite it rebuilds the whole
    table. ``DROP INDEX CONCURRENTLY`` on PostgreSQL, a plain ``DROP INDEX`` on SQLite. The
    migration must set ``atomic = False``. Going backwards builds the index as Django would.
    """

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        column = model._meta.get_field(self.name).column
        # The name Django gave the field's index when it created it (deterministic: a hash of
        # the table and the column), so no index of anyone else's is touched.
        _drop_if_exists(schema_editor,
                        schema_editor._create_index_name(model._meta.db_table, [column], suffix=""))

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        super().database_forwards(app_label, schema_editor, from_state, to_state)


class WithoutAttemptsView(migrations.SeparateDatabaseAndState):
    """Schema operations on the job or attempt table, run with the attempts view out of the way.

    The view (rule 97 (attempt-on-row), migration 0022) reads both tables, and each engine then
    refuses changes to them: PostgreSQL will not alter the type of a column a view uses, and
    SQLite's rebuild of a table (most of its AlterField, RemoveField, RenameField...) fails at the
    rename with "error in view django_ultjobs_attemptrecord". Every migration after 0022 that
    changes either table wraps its operations in this one (a test walks the migrations to hold
    that): it drops the view, runs them, and creates again the version ``view`` of it
    (``attempt_view``: the version the migrations before built, ``attempt_view.LATEST`` written out
    as a number, so that the migration keeps building what it built when a later version comes);
    their state changes pass through unchanged. Keep the migration atomic (the default), so that on
    PostgreSQL no reader sees the view missing and a failure leaves it as it was.
    """

    def __init__(self, operations: list[Any], *, view: int) -> None:
        super().__init__(database_operations=operations, state_operations=operations)
        self.operations = operations
        self.view = view

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return self.__class__.__qualname__, [], {"operations": self.operations, "view": self.view}

    def describe(self) -> str:
        return "Without the attempts view: " + "; ".join(o.describe() for o in self.operations)

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        attempt_view.drop_view(schema_editor)
        super().database_forwards(app_label, schema_editor, from_state, to_state)
        attempt_view.create_view(schema_editor, self.view)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        attempt_view.drop_view(schema_editor)
        super().database_backwards(app_label, schema_editor, from_state, to_state)
        attempt_view.create_view(schema_editor, self.view)
