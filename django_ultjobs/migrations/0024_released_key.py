"""The unique key a job held until a later enqueue took it over (rules 66 (held-key-returns-holder)
and 107 (retry-takes-key-back)).

The take-over cleared the old row's key and kept nothing of it, so a retry of that row could not
tell it had held one and ran it keyless beside the key's new holder. A nullable column without a
default: on PostgreSQL a change of the catalog alone, no rewrite of the jobs table. Rows whose key
was taken over before this migration keep no released key: their retry runs keyless, as before.
"""
from django.db import migrations, models

from django_ultjobs.models.migration_operations import WithoutAttemptsView


class Migration(migrations.Migration):

    dependencies = [
        ('django_ultjobs', '0023_attempt_slot_on_row'),
    ]

    operations = [
        WithoutAttemptsView(
            operations=[
                migrations.AddField(
                    model_name='job',
                    name='released_key',
                    field=models.CharField(blank=True, editable=False, max_length=200,
                                           null=True, verbose_name='released unique key'),
                ),
            ],
            view=2,
        ),
    ]
