"""The attempt a job's own row holds, and the one view every reader reads attempts through
(rule 97 (attempt-on-row)).

``Job.attempt_on_row`` has a constant database default, so on PostgreSQL adding it changes only
the catalog: no rewrite of the jobs table, no long exclusive lock. Its partial index is built
concurrently (settles and enqueues go on meanwhile), so the migration is not atomic, and each
step may run again after an interruption: the column is added only if missing, the view
created again (replaced), the index dropped if half-built. The view is a plain UNION ALL
of the two tables: each engine pushes a reader's filters (a job's id, a finish-time window) into
both halves, so each reads through its own table's indexes. Its SQL is attempt_view's. Going back
writes an attempt row for every attempt a job's row holds before the column goes, so the code
before 0022 (which reads the attempt table alone) loses no history.
"""
from typing import Any

import django.db.models.deletion
from django.db import migrations, models, transaction

from django_ultjobs.models import attempt_view
from django_ultjobs.models.migration_operations import AddIndexConcurrently


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


#: Going back: the code before 0022 reads attempts from the attempt table alone, so each attempt a
#: job's row holds gets its row first, with exactly the facts the view shows for it (see
#: attempt_view). A row already there for that attempt (a re-run after an interruption) is kept.
_WRITE_ROWS = """
INSERT INTO django_ultjobs_jobattempt (job_id, attempt, worker_id, started_at, finished_at,
    outcome, error, slot_key, slot, steps_run, steps_replayed, claims)
SELECT j.id, j.attempt, j.worker_id, j.claimed_at, j.finished_at, 'succeeded', '', '', NULL,
       '[]', '[]', 1
FROM django_ultjobs_job AS j
WHERE j.attempt_on_row AND NOT EXISTS (
    SELECT 1 FROM django_ultjobs_jobattempt AS a WHERE a.job_id = j.id AND a.attempt = j.attempt)
"""


def remove_column(apps: Any, schema_editor: Any) -> None:
    job = apps.get_model("django_ultjobs", "Job")
    # One transaction: the rows and the column's drop land together or not at all.
    with transaction.atomic(using=schema_editor.connection.alias):
        schema_editor.execute(_WRITE_ROWS)
        schema_editor.remove_field(job, _on_row_field(job))


def create_view(apps: Any, schema_editor: Any) -> None:
    attempt_view.create_view(schema_editor)


def drop_view(apps: Any, schema_editor: Any) -> None:
    attempt_view.drop_view(schema_editor)


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
