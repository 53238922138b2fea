# The fleet-slot table is named for what it holds: "slot" is the fleet slot, "lease" only the
# job's visibility lease. Renaming the model renames its content type; the permissions an operator
# was granted on the held-slots page keep working because their codenames are renamed with it.

from django.apps import apps as installed
from django.db import migrations, models


def rename_permissions(apps, schema_editor, old="joblease", new="slot"):
    try:
        permission = apps.get_model("auth", "Permission")
    except LookupError:  # django.contrib.auth is not installed: no permissions to carry over
        return
    rows = permission.objects.using(schema_editor.connection.alias).filter(
        content_type__app_label="django_ultjobs", codename__endswith=f"_{old}")
    for row in rows:
        row.codename = row.codename.removesuffix(old) + new
        row.save(update_fields=["codename"])


def restore_permissions(apps, schema_editor):
    rename_permissions(apps, schema_editor, old="slot", new="joblease")


class Migration(migrations.Migration):

    dependencies = [
        ('django_ultjobs', '0008_worker_timeouts'),
        # The permissions are renamed only where django.contrib.auth keeps them.
        *([('auth', '0001_initial')] if installed.is_installed('django.contrib.auth') else []),
    ]

    # The admin's proxy names its base in the migration state, which RenameModel does not follow:
    # it is dropped and made again on the new name (a proxy has no table, so no SQL either way).
    operations = [
        migrations.DeleteModel(name='HeldSlot'),
        migrations.RenameModel(
            old_name='JobLease',
            new_name='Slot',
        ),
        migrations.AlterModelOptions(
            name='slot',
            options={'verbose_name': 'fleet slot', 'verbose_name_plural': 'fleet slots'},
        ),
        migrations.RemoveConstraint(
            model_name='slot',
            name='ultjobs_lease_key_slot',
        ),
        migrations.AddConstraint(
            model_name='slot',
            constraint=models.UniqueConstraint(fields=('key', 'slot'), name='ultjobs_slot_key_slot'),
        ),
        migrations.CreateModel(
            name='HeldSlot',
            fields=[],
            options={
                'verbose_name': 'held slot',
                'verbose_name_plural': 'held slots',
                'proxy': True,
                'default_permissions': (),
                'indexes': [],
                'constraints': [],
            },
            bases=('django_ultjobs.slot',),
        ),
        migrations.RunPython(rename_permissions, restore_permissions, elidable=True),
    ]
