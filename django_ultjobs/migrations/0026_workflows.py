"""Workflows, batches and job dependencies (docs/workflows.md, rules 110 (released-in-settle) to 118 (bad-graph-refused)).

Two new tables, and new columns on the jobs table, each nullable or with a constant default: on
PostgreSQL a change of the catalog alone, no rewrite of the table. The indexes come in 0027,
built concurrently.
"""
import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

from django_ultjobs.models.migration_operations import WithoutAttemptsView


class Migration(migrations.Migration):

    dependencies = [
        ('django_ultjobs', '0025_live_index'),
    ]

    operations = [
        migrations.CreateModel(
            name='Batch',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('description', models.CharField(blank=True, default='', max_length=200)),
                ('total', models.IntegerField(default=0)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'verbose_name': 'batch',
                'verbose_name_plural': 'batches',
            },
        ),
        migrations.CreateModel(
            name='Workflow',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('name', models.CharField(blank=True, default='', max_length=200)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'verbose_name': 'workflow',
                'verbose_name_plural': 'workflows',
            },
        ),
        WithoutAttemptsView(
            operations=[
                migrations.AddField(
                    model_name='job',
                    name='cancelled_by',
                    field=models.BigIntegerField(blank=True, editable=False, null=True),
                ),
                migrations.AddField(
                    model_name='job',
                    name='dependents',
                    field=models.JSONField(blank=True, editable=False, null=True),
                ),
                migrations.AddField(
                    model_name='job',
                    name='depends_on',
                    field=models.JSONField(blank=True, editable=False, null=True),
                ),
                migrations.AddField(
                    model_name='job',
                    name='depends_when',
                    field=models.CharField(blank=True, db_default='', default='', editable=False, max_length=16),
                ),
                migrations.AddField(
                    model_name='job',
                    name='deps_done',
                    field=models.IntegerField(db_default=0, default=0, editable=False),
                ),
                migrations.AddField(
                    model_name='job',
                    name='deps_failed',
                    field=models.IntegerField(db_default=0, default=0, editable=False),
                ),
                migrations.AddField(
                    model_name='job',
                    name='deps_total',
                    field=models.IntegerField(db_default=0, default=0, editable=False),
                ),
                migrations.AddField(
                    model_name='job',
                    name='has_dependents',
                    field=models.BooleanField(db_default=False, default=False, editable=False),
                ),
                migrations.AddField(
                    model_name='job',
                    name='wait_key',
                    field=models.CharField(blank=True, editable=False, max_length=40, null=True),
                ),
                migrations.AlterField(
                    model_name='job',
                    name='status',
                    field=models.CharField(choices=[('queued', 'queued'), ('running', 'running'), ('waiting', 'waiting'), ('pending', 'pending'), ('succeeded', 'succeeded'), ('failed', 'failed'), ('cancelled', 'cancelled')], default='queued', max_length=16),
                ),
                migrations.AddField(
                    model_name='job',
                    name='batch',
                    field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, editable=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='members', to='django_ultjobs.batch'),
                ),
                migrations.AddField(
                    model_name='job',
                    name='callback_of',
                    field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, editable=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='callbacks', to='django_ultjobs.batch'),
                ),
                migrations.AddField(
                    model_name='job',
                    name='workflow',
                    field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, editable=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='nodes', to='django_ultjobs.workflow'),
                ),
            ],
            view=2,
        ),
    ]
