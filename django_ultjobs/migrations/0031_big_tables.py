"""Tables of millions of jobs. The attempt and step tables' foreign keys to jobs leave
PostgreSQL (each cost a query per finished job the prune deleted: ``DropForeignKeyConstraint``);
partial indexes of the pending and the failed jobs by queue serve the stats' counts of each; and
version 3 of the attempts view selects the attempts the jobs' rows hold as SQLite's partial
index of them states it (version 2 read every job row there). The indexes are built concurrently
so a busy jobs table stays writable meanwhile: the migration is not atomic, each operation is one
statement on PostgreSQL, and the view's is a transaction of its own (PostgreSQL replaces the view
in one statement, readers never see it missing).
"""
from typing import Any

import django.db.models.deletion
from django.db import migrations, models

from django_ultjobs.models import attempt_view
from django_ultjobs.models.migration_operations import (
    AddIndexConcurrently,
    DropForeignKeyConstraint,
)


def create_view_3(apps: Any, schema_editor: Any) -> None:
    attempt_view.create_view(schema_editor, 3)


def create_view_2(apps: Any, schema_editor: Any) -> None:
    attempt_view.create_view(schema_editor, 2)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('django_ultjobs', '0030_worker_runners'),
    ]

    operations = [
        DropForeignKeyConstraint(
            model_name='jobattempt',
            name='job',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='attempt_rows', to='django_ultjobs.job'),
        ),
        DropForeignKeyConstraint(
            model_name='jobstep',
            name='job',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='steps', to='django_ultjobs.job'),
        ),
        AddIndexConcurrently(
            model_name='job',
            index=models.Index(models.F('queue'), condition=models.Q(('status', 'pending')), name='ultjobs_job_pending'),
        ),
        AddIndexConcurrently(
            model_name='job',
            index=models.Index(models.F('queue'), models.F('finished_at'), condition=models.Q(('status', 'failed')), name='ultjobs_job_failed'),
        ),
        migrations.RunPython(create_view_3, create_view_2, atomic=True),
    ]
