from django.db import migrations, models

from django_ultjobs.models.migration_operations import AddUniqueConstraintConcurrently


class Migration(migrations.Migration):
    # The unique index is built with CREATE UNIQUE INDEX CONCURRENTLY, which cannot run in a
    # transaction: the job table stays writable meanwhile. The columns are added without a
    # rewrite on PostgreSQL (a nullable column, and a constant default).
    atomic = False

    dependencies = [
        ('django_ultjobs', '0018_queue_pause'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='unique_key',
            field=models.CharField(blank=True, editable=False, max_length=200, null=True, verbose_name='unique key'),
        ),
        migrations.AddField(
            model_name='job',
            name='unique_for',
            field=models.FloatField(db_default=0.0, default=0.0, editable=False),
        ),
        AddUniqueConstraintConcurrently(
            model_name='job',
            constraint=models.UniqueConstraint(condition=models.Q(('unique_key__isnull', False)), fields=('name', 'unique_key'), name='ultjobs_job_unique_key'),
        ),
    ]
