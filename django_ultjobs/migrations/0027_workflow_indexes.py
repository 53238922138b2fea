"""The partial indexes of 0026's columns, built concurrently: a busy jobs table stays writable
while they are built (settles and enqueues go on), so the migration is not atomic. Each holds
only batch members, callbacks or workflow nodes: plain jobs cost them nothing."""
from django.db import migrations, models

from django_ultjobs.models.migration_operations import AddIndexConcurrently


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('django_ultjobs', '0026_workflows'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='job',
            index=models.Index(models.F('batch'), condition=models.Q(('batch__isnull', False), ('status__in', ['queued', 'running', 'waiting', 'pending'])), name='ultjobs_job_batch_open'),
        ),
        AddIndexConcurrently(
            model_name='job',
            index=models.Index(models.F('batch'), models.F('id'), condition=models.Q(('batch__isnull', False)), name='ultjobs_job_batch'),
        ),
        AddIndexConcurrently(
            model_name='job',
            index=models.Index(models.F('callback_of'), condition=models.Q(('callback_of__isnull', False)), name='ultjobs_job_callback_of'),
        ),
        AddIndexConcurrently(
            model_name='job',
            index=models.Index(models.F('workflow'), models.F('id'), condition=models.Q(('workflow__isnull', False)), name='ultjobs_job_workflow'),
        ),
    ]
