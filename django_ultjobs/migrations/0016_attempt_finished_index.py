from django.db import migrations, models

from django_ultjobs.models.migration_operations import AddIndexConcurrently


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction; settles go on meanwhile.
    atomic = False

    dependencies = [
        ('django_ultjobs', '0012_schedules'),
    ]

    operations = [
        # The admin's charts read the newest attempts of a window, a bounded number
        # (rule 80 (bounded-charts)).
        AddIndexConcurrently(
            model_name='jobattempt',
            index=models.Index(models.F('finished_at'), name='ultjobs_attempt_finished'),
        ),
    ]
