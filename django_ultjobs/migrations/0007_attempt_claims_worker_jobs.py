from django.db import migrations, models


class Migration(migrations.Migration):
    # Both columns are catalog-only changes on PostgreSQL 11+ (a constant default, a nullable
    # column): no table rewrite or scan, so settles go on while it runs. Code from before this
    # migration keeps working against it: it never names either column.

    dependencies = [
        ('django_ultjobs', '0006_attempt_slot_lost_index'),
    ]

    operations = [
        migrations.AddField(
            model_name='jobattempt',
            name='claims',
            field=models.IntegerField(db_default=1, default=1),
        ),
        migrations.AddField(
            model_name='worker',
            name='jobs',
            field=models.JSONField(blank=True, null=True),
        ),
    ]
