# The admin's pages of their own: in-flight jobs, held slots and lost-slot cancellations. Proxies only: no
# tables, and no permissions (the admin checks Job's), so nothing changes in the database schema.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('django_ultjobs', '0002_steps_events'),
    ]

    operations = [
        migrations.CreateModel(
            name='InFlightJob',
            fields=[
            ],
            options={
                'verbose_name': 'in-flight job',
                'verbose_name_plural': 'in-flight jobs',
                'proxy': True,
                'default_permissions': (),
                'indexes': [],
                'constraints': [],
            },
            bases=('django_ultjobs.job',),
        ),
        migrations.CreateModel(
            name='HeldSlot',
            fields=[
            ],
            options={
                'verbose_name': 'held slot',
                'verbose_name_plural': 'held slots',
                'proxy': True,
                'default_permissions': (),
                'indexes': [],
                'constraints': [],
            },
            bases=('django_ultjobs.joblease',),
        ),
        migrations.CreateModel(
            name='LostSlotCancellation',
            fields=[
            ],
            options={
                'verbose_name': 'lost-slot cancellation',
                'verbose_name_plural': 'lost-slot cancellations',
                'proxy': True,
                'default_permissions': (),
                'indexes': [],
                'constraints': [],
            },
            bases=('django_ultjobs.jobattempt',),
        ),
    ]
