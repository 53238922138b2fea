from django.db import migrations, models

from django_ultjobs.models.migration_operations import AddIndexConcurrently


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction; the table stays writable meanwhile.
    atomic = False

    dependencies = [
        ('django_ultjobs', '0024_released_key'),
    ]

    operations = [
        # The stats view's and the admin summary's bounded counts of live jobs (rule 120 (bounded-live-stats)).
        AddIndexConcurrently(
            model_name='job',
            index=models.Index(
                'queue', 'status', 'visible_at', 'name',
                condition=models.Q(status__in=['queued', 'running', 'waiting']),
                name='ultjobs_job_live',
            ),
        ),
    ]
