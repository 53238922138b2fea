from django.db import migrations, models

from django_ultjobs.models.migration_operations import AddIndexConcurrently


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction; the table stays writable meanwhile.
    atomic = False

    dependencies = [
        ('django_ultjobs', '0003_admin_views'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='job',
            index=models.Index(models.F('name'), models.OrderBy(models.F('priority'), descending=True), models.F('visible_at'), models.F('id'), condition=models.Q(('status__in', ['queued', 'running', 'waiting'])), name='ultjobs_job_claim_kind'),
        ),
    ]
