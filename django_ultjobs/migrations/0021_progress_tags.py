"""Tags and progress of a job (rules 78 (tags-stored-whole) and 79 (progress-throttled-fenced)).

Both columns are nullable or have a constant database default, so on PostgreSQL adding them
changes only the catalog: no rewrite of the jobs table, no long exclusive lock.
"""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_ultjobs', '0020_timeouts'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='progress',
            field=models.JSONField(blank=True, editable=False, null=True, verbose_name='progress'),
        ),
        migrations.AddField(
            model_name='job',
            name='tags',
            field=models.JSONField(blank=True, db_default=[], default=list, editable=False, verbose_name='tags'),
        ),
    ]
