# Per-key caps (Job.concurrency_key, rule 50 (per-key-cap)) and the rate limiter's buckets
# (rule 52 (fleet-rate-limit)).

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_ultjobs', '0016_attempt_finished_index'),
    ]

    operations = [
        migrations.CreateModel(
            name='RateLimitBucket',
            fields=[
                ('key', models.CharField(max_length=200, primary_key=True, serialize=False)),
                ('tat', models.BigIntegerField()),
                ('granted', models.IntegerField(default=0)),
                ('interval', models.BigIntegerField()),
                ('tolerance', models.BigIntegerField()),
                ('updated_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'verbose_name': 'rate limit',
                'verbose_name_plural': 'rate limits',
            },
        ),
        migrations.AddField(
            model_name='job',
            name='concurrency_key',
            field=models.CharField(blank=True, db_default='', default='', max_length=200),
        ),
    ]
