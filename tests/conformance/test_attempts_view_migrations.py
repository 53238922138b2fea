"""Later migrations and the attempts view (rule 97 (attempt-on-row)): every change to the job or
attempt table after 0022 runs inside ``WithoutAttemptsView``, which lets it through on both
engines."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, connections, migrations
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from django_ultjobs.models import ON_ROW_ID, Job, attempt_view
from django_ultjobs.models.migration_operations import (
    AddIndexConcurrently,
    AddUniqueConstraintConcurrently,
    DropFieldIndexConcurrently,
    DropForeignKeyConstraint,
    RemoveIndexConcurrently,
    WithoutAttemptsView,
)

_APP = "django_ultjobs"
_VIEW_MIGRATION = (_APP, "0022_attempt_on_row")
_TABLES = {"job", "jobattempt"}
# Index operations leave the tables alone on both engines (SQLite builds an index in place), and
# so does dropping a foreign key's constraint (a catalog change on PostgreSQL, none on SQLite).
_INDEX_ONLY = (migrations.AddIndex, migrations.RemoveIndex, migrations.RenameIndex,
               AddIndexConcurrently, RemoveIndexConcurrently, AddUniqueConstraintConcurrently,
               DropFieldIndexConcurrently, DropForeignKeyConstraint)


def _model_of(operation: Any) -> str | None:
    """The model an operation changes (lower case), None for one on no model (RunSQL...)."""
    if isinstance(operation, migrations.operations.models.ModelOperation):
        return operation.name_lower
    name = getattr(operation, "model_name", None)
    return str(name).lower() if name else None


def _unwrapped(operations: list[Any]) -> list[Any]:
    """The operations on the job or attempt table that run outside ``WithoutAttemptsView``."""
    found = []
    for operation in operations:
        if isinstance(operation, WithoutAttemptsView):
            continue
        if isinstance(operation, migrations.SeparateDatabaseAndState):
            found += _unwrapped(operation.database_operations)
        elif _model_of(operation) in _TABLES and not isinstance(operation, _INDEX_ONLY):
            found.append(operation)
    return found


def _after(key: tuple[str, str]) -> list[Any]:
    """The app's migrations that come after ``key`` in the graph."""
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    seen: set[tuple[str, str]] = set()
    todo = [key]
    while todo:
        for child in graph.node_map[todo.pop()].children:
            if child.key not in seen:
                seen.add(child.key)
                todo.append(child.key)
    return [graph.nodes[later] for later in sorted(seen) if later[0] == _APP]


# rule 97 (attempt-on-row)
def test_every_later_change_to_the_two_tables_runs_without_the_view() -> None:
    assert [(m.name, o.describe()) for m in _after(_VIEW_MIGRATION)
            for o in _unwrapped(m.operations)] == []
    # The walk sees what comes after: from 0021 it reaches 0022.
    assert "0022_attempt_on_row" in [m.name for m in _after((_APP, "0021_progress_tags"))]


def _widened_worker_id() -> migrations.AlterField:
    field = Job._meta.get_field("worker_id").clone()
    field.max_length = 300
    return migrations.AlterField(model_name="job", name="worker_id", field=field)


# rule 97 (attempt-on-row)
def test_the_check_finds_a_bare_change_and_lets_a_wrapped_one_through() -> None:
    bare = [_widened_worker_id(), migrations.RemoveField(model_name="jobattempt", name="slot"),
            migrations.AlterModelTable(name="job", table="elsewhere"),
            migrations.SeparateDatabaseAndState(database_operations=[
                migrations.RenameField(model_name="job", old_name="worker_id", new_name="w")])]
    assert len(_unwrapped(bare)) == 4
    assert _unwrapped([WithoutAttemptsView(operations=bare, view=attempt_view.LATEST),
                       AddIndexConcurrently(model_name="job", index=_an_index())]) == []


def _an_index() -> Any:
    from django.db import models
    return models.Index("worker_id", name="ultjobs_job_worker_probe")


def _worker_id_size(alias: str) -> int:
    connection = connections[alias]
    with connection.cursor() as cursor:
        columns = connection.introspection.get_table_description(cursor, Job._meta.db_table)
    (column,) = [c for c in columns if c.name == "worker_id"]
    return column.internal_size or column.display_size


def _apply(alias: str, operation: Any, *, backwards: bool = False) -> None:
    connection = connections[alias]
    before = MigrationExecutor(connection).loader.project_state()
    after = before.clone()
    operation.state_forwards(_APP, after)
    with connection.schema_editor(atomic=True) as editor:
        if backwards:
            operation.database_backwards(_APP, editor, after, before)
        else:
            operation.database_forwards(_APP, editor, before, after)


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_change_to_a_column_the_view_reads_goes_through_inside_the_wrapper(
        alias: str) -> None:  # rule 97 (attempt-on-row)
    with pytest.raises(DatabaseError):
        _apply(alias, _widened_worker_id())
    wrapped = WithoutAttemptsView(operations=[_widened_worker_id()], view=attempt_view.LATEST)
    try:
        _apply(alias, wrapped)
        assert _worker_id_size(alias) == 300
        job = Job.objects.using(alias).create(name="add", status="succeeded", attempt=1,
                                              worker_id="w" * 250, attempt_on_row=True)
        assert [a.worker_id for a in job.attempts.all()] == ["w" * 250]
    finally:
        Job.objects.using(alias).all().delete()
        _apply(alias, wrapped, backwards=True)
    assert _worker_id_size(alias) == 200


# rule 97 (attempt-on-row)
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_the_view_made_again_over_itself_reads_the_same(alias: str) -> None:
    # A re-run of 0022 (or of a wrapper) makes the view again where it already is: on
    # PostgreSQL with CREATE OR REPLACE VIEW, so readers never find it missing.
    job = Job.objects.using(alias).create(name="add", status="succeeded", attempt=1,
                                          worker_id="w1", attempt_on_row=True)
    try:
        statements: list[str] = []
        with connections[alias].schema_editor(atomic=True) as editor:
            execute = editor.execute

            def record(sql: Any, params: Any = ()) -> None:
                statements.append(str(sql).split(" AS")[0])
                execute(sql, params)
            editor.execute = record
            attempt_view.create_view(editor, attempt_view.LATEST)
        assert statements == (
            ["CREATE OR REPLACE VIEW django_ultjobs_attemptrecord"] if alias == "postgres" else
            ["DROP VIEW IF EXISTS django_ultjobs_attemptrecord",
             "CREATE VIEW django_ultjobs_attemptrecord"])
        assert [(a.id, a.worker_id) for a in job.attempts.all()] == [(ON_ROW_ID + job.id, "w1")]
    finally:
        Job.objects.using(alias).all().delete()
