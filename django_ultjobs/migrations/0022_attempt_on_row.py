"""The attempt a job's own row holds, and the one view every reader reads attempts through
(rule 97; docs/performance.md, items 87-88).

``Job.attempt_on_row`` has a constant database default, so on PostgreSQL adding it changes only
the catalog: no rewrite of the jobs table, no long exclusive lock. The view is a plain UNION ALL
of the two tables: each engine pushes a reader's filters (a job's id, a finish-time window) into
both halves, so each reads through its own table's indexes.
"""
from typing import Any

import django.db.models.deletion
from django.db import migrations, models

#: The attempt a job's row holds: the job's claim is the attempt's start (the settle records
#: the claim time as the start of every attempt), its finish time and worker are the attempt's.
#: status = 'succeeded' lets a finish-time window use the finished-jobs partial index.
_VIEW = """
CREATE VIEW django_ultjobs_attemptrecord AS
SELECT a.id, a.job_id, a.attempt, a.worker_id, a.started_at, a.finished_at, a.outcome,
       a.error, a.slot_key, a.slot, a.steps_run, a.steps_replayed, a.claims
FROM django_ultjobs_jobattempt AS a
UNION ALL
SELECT -j.id, j.id, j.attempt, j.worker_id, j.claimed_at, j.finished_at, 'succeeded',
       '', '', {null_int}, {empty_list}, {empty_list}, 1
FROM django_ultjobs_job AS j
WHERE j.status = 'succeeded' AND j.attempt_on_row
"""


def create_view(apps: Any, schema_editor: Any) -> None:
    postgres = schema_editor.connection.vendor == "postgresql"
    schema_editor.execute(_VIEW.format(
        null_int="NULL::integer" if postgres else "NULL",
        empty_list="'[]'::jsonb" if postgres else "'[]'"))


def drop_view(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute("DROP VIEW IF EXISTS django_ultjobs_attemptrecord")


class Migration(migrations.Migration):

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
        migrations.AddField(
            model_name='job',
            name='attempt_on_row',
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.RunPython(create_view, drop_view),
    ]
