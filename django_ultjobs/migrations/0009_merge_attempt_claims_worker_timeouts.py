from django.db import migrations


class Migration(migrations.Migration):
    # 0007 (park episodes, the jobs workers know) and 0008 (workers' own timeouts) were written
    # side by side, both after 0006; this joins them, whichever a database applied first.

    dependencies = [
        ('django_ultjobs', '0007_attempt_claims_worker_jobs'),
        ('django_ultjobs', '0008_worker_timeouts'),
    ]

    operations = []
