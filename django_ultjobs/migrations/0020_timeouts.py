"""Run timeouts, expiry, cancel reasons and overrunning runs (rules 55 (timeout-cancels) to
59 (cancel-reason-kept)).

Every column is added nullable or with a constant database default, so on PostgreSQL adding it
changes only the catalog: no rewrite of the jobs table, no long exclusive lock. The outcome's new
choices change no SQL.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_ultjobs', '0019_unique_jobs'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='cancel_reason',
            field=models.TextField(blank=True, db_default='', default=''),
        ),
        migrations.AddField(
            model_name='job',
            name='expires_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='timeout',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='worker',
            name='overrunning',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='jobattempt',
            name='outcome',
            field=models.CharField(choices=[('succeeded', 'succeeded'), ('retrying', 'retrying'), ('failed', 'failed'), ('cancelled', 'cancelled'), ('slot_lost', 'slot lost'), ('lease_lost', 'lease lost'), ('suspended', 'suspended'), ('interrupted', 'interrupted'), ('timed_out', 'timed out'), ('non_retryable', 'non-retryable'), ('not_retried', 'not retried'), ('expired', 'expired')], max_length=16),
        ),
    ]
