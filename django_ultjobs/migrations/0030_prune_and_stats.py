"""The attempt and step tables' foreign keys to jobs leave PostgreSQL (each cost a query per
finished job the prune deleted: ``DropForeignKeyConstraint``), and partial indexes of the
pending and the failed jobs by queue serve the stats' counts of each. The indexes are built
concurrently so a busy jobs table stays writable meanwhile: the migration is not atomic, and each
operation is one statement on PostgreSQL."""
import django.db.models.deletion
from django.db import migrations, models

from django_ultjobs.models.migration_operations import (
    AddIndexConcurrently,
    DropForeignKeyConstraint,
)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('django_ultjobs', '0028_live_index_apart'),
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
    ]
