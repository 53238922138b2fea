from django.db import migrations, models


class Migration(migrations.Migration):
    # Nullable columns without a default: PostgreSQL adds them without rewriting the table, and
    # rows of workers that ran before are judged by ULTJOBS["VISIBILITY_TIMEOUT"] as they were.

    dependencies = [
        ('django_ultjobs', '0007_attempt_claims_worker_jobs'),
    ]

    operations = [
        migrations.AddField(
            model_name='worker',
            name='visibility_timeout',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='worker',
            name='heartbeat_interval',
            field=models.FloatField(blank=True, null=True),
        ),
    ]
