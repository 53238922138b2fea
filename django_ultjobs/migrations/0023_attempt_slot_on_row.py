"""The attempt a job's row holds may have held a per-job fleet slot (rule 97 (attempt-on-row)): the
slot's number is ``Job.attempt_slot``, and version 2 of the attempts view shows it, with the job's
per-job slot key, as the attempt row would have.

A nullable column without a default: on PostgreSQL a change of the catalog alone, no rewrite of
the jobs table. The migration is atomic, so readers never see the view missing. Going back
writes an attempt row for every attempt a job's row holds with a slot, and clears the row's
flag, before version 1 of the view (which shows no slot) comes back: no fact is lost.
"""
from typing import Any

from django.db import migrations, models

from django_ultjobs.models import attempt_view
from django_ultjobs.models.migration_operations import WithoutAttemptsView


def create_view_2(apps: Any, schema_editor: Any) -> None:
    attempt_view.create_view(schema_editor, 2)


#: Going back: each attempt a job's row holds with a slot gets its row, with exactly the facts
#: version 2 of the view shows for it; a row already there for that attempt is kept. Then the
#: job's row holds it no more (version 1 would show it a second time, without its slot).
_WRITE_ROWS = """
INSERT INTO django_ultjobs_jobattempt (job_id, attempt, worker_id, started_at, finished_at,
    outcome, error, slot_key, slot, steps_run, steps_replayed, claims)
SELECT j.id, j.attempt, j.worker_id, j.claimed_at, j.finished_at, 'succeeded', '',
       'job:' || j.name, j.attempt_slot, '[]', '[]', 1
FROM django_ultjobs_job AS j
WHERE j.attempt_on_row AND j.attempt_slot IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM django_ultjobs_jobattempt AS a WHERE a.job_id = j.id AND a.attempt = j.attempt)
"""
_CLEAR_ROWS = """
UPDATE django_ultjobs_job SET attempt_on_row = false, attempt_slot = NULL
WHERE attempt_slot IS NOT NULL
"""


def back_to_view_1(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute(_WRITE_ROWS)
    schema_editor.execute(_CLEAR_ROWS)
    attempt_view.create_view(schema_editor, 1)


class Migration(migrations.Migration):

    dependencies = [
        ('django_ultjobs', '0022_attempt_on_row'),
    ]

    operations = [
        WithoutAttemptsView(
            operations=[
                migrations.AddField(
                    model_name='job',
                    name='attempt_slot',
                    field=models.IntegerField(editable=False, null=True),
                ),
            ],
            view=1,
        ),
        migrations.RunPython(create_view_2, back_to_view_1),
    ]
