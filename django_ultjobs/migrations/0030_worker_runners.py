"""Which child process runs each run of a worker with ``--pool process``: one nullable column of
the workers table, for the admin's in-flight page."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_ultjobs', '0028_live_index_apart'),
    ]

    operations = [
        migrations.AddField(
            model_name='worker',
            name='runners',
            field=models.JSONField(blank=True, null=True),
        ),
    ]
