import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    # A table of its own, not a column on the jobs: pausing writes one row, never the jobs, and
    # the claim probes it by primary key (rule 75 (paused-queue)).

    dependencies = [
        ('django_ultjobs', '0017_flow_control'),
    ]

    operations = [
        migrations.CreateModel(
            name='QueuePause',
            fields=[
                ('queue', models.CharField(max_length=100, primary_key=True, serialize=False)),
                ('paused_at', models.DateTimeField(
                    db_default=django.db.models.functions.datetime.Now())),
                ('paused_by', models.CharField(blank=True, default='', max_length=200)),
                ('reason', models.TextField(blank=True, default='')),
            ],
            options={
                'default_permissions': (),
                'verbose_name': 'paused queue',
                'verbose_name_plural': 'paused queues',
            },
        ),
    ]
