from django.db import migrations, models

from django_ultjobs.models.migration_operations import AddIndexConcurrently, RemoveIndexConcurrently


class Migration(migrations.Migration):
    # CREATE/DROP INDEX CONCURRENTLY cannot run in a transaction; settles go on meanwhile.
    atomic = False

    dependencies = [
        ('django_ultjobs', '0005_attempt_job_single_index'),
    ]

    operations = [
        # Attempts were indexed by outcome for the lost-slot pages, which read slot_lost ones
        # only: a partial index of those replaces an index write per attempt of every job.
        AddIndexConcurrently(
            model_name='jobattempt',
            index=models.Index(models.F('finished_at'), models.F('id'), condition=models.Q(('outcome', 'slot_lost')), name='ultjobs_attempt_slot_lost'),
        ),
        RemoveIndexConcurrently(
            model_name='jobattempt',
            name='ultjobs_attempt_outcome',
        ),
    ]
