"""The attempt a job's own row holds, and the one view every reader reads attempts through
(rule 97; docs/performance.md, items 87-88).

``Job.attempt_on_row`` has a constant database default, so on PostgreSQL adding it changes only
the catalog: no rewrite of the jobs table, no long exclusive lock. Its partial index is built
concurrently (settles and enqueues go on meanwhile), so the migration is not atomic, and each
step may run again after an interruption: the column is added only if missing, the view
dropped and created again, the index dropped if half-built. The view is a plain UNION ALL
of the two tables: each engine pushes a reader's filters (a job's id, a finish-time window) into
both halves, so each reads through its own table's indexes.
"""
from typing import Any

import django.db.models.deletion
from django.db import migrations, models

from django_ultjobs.migration_operations import AddIndexConcurrently

#: The attempt a job's row holds, its id 2**62 + the job's id: above every attempt row's id, so
#: ordered by id it comes after the job's rows, as it happened. The job's claim is the attempt's start (the settle records
#: the claim time as the start of every attempt), its finish time and worker are the attempt's.
#: Only a settle to succeeded sets attempt_on_row, and nothing moves a succeeded job, so the flag
#: alone selects them: a finish-time window reads the partial index alone (an index-only scan).
#: On PostgreSQL each constant has its column's exact type: with any other, the planner keeps the
#: second half as a subquery and sorts it whole instead of merging it in index order.
_VIEW = """
CREATE VIEW django_ultjobs_attemptrecord AS
SELECT a.id, a.job_id, a.attempt, a.worker_id, a.started_at, a.finished_at, a.outcome,
       a.error, a.slot_key, a.slot, a.steps_run, a.steps_replayed, a.claims
FROM django_ultjobs_jobattempt AS a
UNION ALL
SELECT 4611686018427387904 + j.id, j.id, j.attempt, j.worker_id, j.claimed_at, j.finished_at, {succeeded},
       {no_error}, {no_slot_key}, {no_slot}, {no_steps}, {no_steps}, 1
FROM django_ultjobs_job AS j
WHERE j.attempt_on_row
"""
_CONSTANTS = {
    "postgresql": {"succeeded": "'succeeded'::varchar(16)", "no_error": "''::text",
                   "no_slot_key": "''::varchar(200)", "no_slot": "NULL::integer",
                   "no_steps": "'[]'::jsonb"},
    "sqlite": {"succeeded": "'succeeded'", "no_error": "''", "no_slot_key": "''",
               "no_slot": "NULL", "no_steps": "'[]'"},
}


def _on_row_field(job: Any) -> Any:
    """The column on the historical model (added to it when the state has it not yet)."""
    try:
        return job._meta.get_field("attempt_on_row")
    except Exception:
        field = models.BooleanField(default=False, db_default=False, editable=False)
        field.contribute_to_class(job, "attempt_on_row")
        return field


def add_column(apps: Any, schema_editor: Any) -> None:
    job = apps.get_model("django_ultjobs", "Job")
    with schema_editor.connection.cursor() as cursor:
        columns = schema_editor.connection.introspection.get_table_description(
            cursor, job._meta.db_table)
    if all(c.name != "attempt_on_row" for c in columns):
        schema_editor.add_field(job, _on_row_field(job))


def remove_column(apps: Any, schema_editor: Any) -> None:
    job = apps.get_model("django_ultjobs", "Job")
    schema_editor.remove_field(job, _on_row_field(job))


def create_view(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute("DROP VIEW IF EXISTS django_ultjobs_attemptrecord")
    schema_editor.execute(_VIEW.format(**_CONSTANTS[schema_editor.connection.vendor]))


def drop_view(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute("DROP VIEW IF EXISTS django_ultjobs_attemptrecord")


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction.
    atomic = False

    dependencies = [
        ('django_ultjobs', '0021_progress_tags'),
    ]

    operations = [
        # job.attempts now reads every attempt through the view; the rows are job.attempt_rows
        # (the catalog only: no SQL).
        migrations.AlterField(
            model_name='jobattempt',
            name='job',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='attempt_rows', to='django_ultjobs.job'),
        ),
        migrations.CreateModel(
            name='AttemptRecord',
            fields=[
                ('id', models.BigIntegerField(primary_key=True, serialize=False)),
                ('attempt', models.PositiveIntegerField()),
                ('worker_id', models.CharField(blank=True, default='', max_length=200)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField()),
                ('outcome', models.CharField(choices=[('succeeded', 'succeeded'), ('retrying', 'retrying'), ('failed', 'failed'), ('cancelled', 'cancelled'), ('slot_lost', 'slot lost'), ('lease_lost', 'lease lost'), ('suspended', 'suspended'), ('interrupted', 'interrupted'), ('timed_out', 'timed out'), ('non_retryable', 'non-retryable'), ('not_retried', 'not retried'), ('expired', 'expired')], max_length=16)),
                ('error', models.TextField(blank=True, default='')),
                ('slot_key', models.CharField(blank=True, default='', max_length=200)),
                ('slot', models.IntegerField(blank=True, null=True)),
                ('steps_run', models.JSONField(blank=True, default=list)),
                ('steps_replayed', models.JSONField(blank=True, default=list)),
                ('claims', models.IntegerField(default=1)),
            ],
            options={
                'verbose_name': 'attempt',
                'verbose_name_plural': 'attempts',
                'db_table': 'django_ultjobs_attemptrecord',
                'managed': False,
                'default_permissions': (),
            },
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddField(
                model_name='job',
                name='attempt_on_row',
                field=models.BooleanField(db_default=False, default=False, editable=False),
            )],
            database_operations=[migrations.RunPython(add_column, remove_column)],
        ),
        migrations.RunPython(create_view, drop_view),
        AddIndexConcurrently(
            model_name='job',
            index=models.Index(models.F('finished_at'), condition=models.Q(('attempt_on_row', True)), name='ultjobs_job_attempt_on_row'),
        ),
    ]
