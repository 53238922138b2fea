import django.db.models.deletion
from django.db import migrations, models

from django_ultjobs.models.migration_operations import DropFieldIndexConcurrently


class Migration(migrations.Migration):
    # DROP INDEX CONCURRENTLY cannot run in a transaction; settles go on meanwhile.
    atomic = False

    dependencies = [
        ('django_ultjobs', '0004_claim_kind_index'),
    ]

    operations = [
        # The attempt table's job_id had two indexes: the foreign key's own and (job, attempt).
        DropFieldIndexConcurrently(
            model_name='jobattempt',
            name='job',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='attempts', to='django_ultjobs.job'),
        ),
    ]
