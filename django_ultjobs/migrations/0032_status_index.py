"""The jobs list filtered by failed or cancelled reads one range of a partial index of the jobs
in those two statuses, in id order, instead of walking the primary key backwards past every
newer job of another status. Built concurrently, so a busy jobs table stays writable meanwhile
(the migration is not atomic)."""
from django.db import migrations, models

from django_ultjobs.models.migration_operations import AddIndexConcurrently


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('django_ultjobs', '0031_big_tables'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='job',
            index=models.Index(models.F('status'), models.F('id'), condition=models.Q(('status__in', ['failed', 'cancelled'])), name='ultjobs_job_status'),
        ),
    ]
