# Periodic jobs: the schedules' table (cursor and pause per periodic job), and the tick each job
# row was enqueued for, unique per job name (rule 60 (tick-once)).

import django.db.models.functions.datetime
from django.db import migrations, models

from django_ultjobs.models.migration_operations import AddUniqueConstraintConcurrently


class Migration(migrations.Migration):
    # CREATE UNIQUE INDEX CONCURRENTLY cannot run in a transaction; the job table stays writable
    # while it is built. The new column is nullable without a default: no table rewrite.
    atomic = False

    dependencies = [
        ('django_ultjobs', '0009_slot_model'),
    ]

    operations = [
        migrations.CreateModel(
            name='JobSchedule',
            fields=[
                ('name', models.CharField(max_length=200, primary_key=True, serialize=False)),
                ('schedule', models.CharField(max_length=200)),
                ('timezone', models.CharField(blank=True, default='', max_length=64)),
                ('catch_up', models.CharField(default='latest', max_length=16)),
                ('paused', models.BooleanField(default=False)),
                ('last_tick', models.DateTimeField(blank=True, null=True)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('updated_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'verbose_name': 'schedule',
                'verbose_name_plural': 'schedules',
            },
        ),
        migrations.AddField(
            model_name='job',
            name='scheduled_for',
            field=models.DateTimeField(blank=True, null=True),
        ),
        AddUniqueConstraintConcurrently(
            model_name='job',
            constraint=models.UniqueConstraint(condition=models.Q(('scheduled_for__isnull', False)), fields=('name', 'scheduled_for'), name='ultjobs_job_tick'),
        ),
    ]
