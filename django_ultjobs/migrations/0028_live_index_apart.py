from django.db import migrations, models

from django_ultjobs.models.migration_operations import (
    AddIndexConcurrently,
    RemoveIndexConcurrently,
)


class Migration(migrations.Migration):
    # CONCURRENTLY cannot run in a transaction; the table stays writable meanwhile.
    atomic = False

    dependencies = [
        ('django_ultjobs', '0027_workflow_indexes'),
    ]

    operations = [
        # The live index gains a term no claim states (name > '', true of every job), so a
        # planner without statistics can no longer take it for a claim and sort the whole
        # backlog on every claim; the stats state the term (rule 120 (bounded-live-stats)).
        RemoveIndexConcurrently(model_name='job', name='ultjobs_job_live'),
        AddIndexConcurrently(
            model_name='job',
            index=models.Index(
                'queue', 'status', 'visible_at', 'name',
                condition=models.Q(status__in=['queued', 'running', 'waiting'], name__gt=''),
                name='ultjobs_job_live',
            ),
        ),
    ]
