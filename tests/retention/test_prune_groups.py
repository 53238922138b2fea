"""Retention of batches and workflows (rule 151 (group-pruned-when-empty)): a group's row goes
once none of its jobs is left (each pruned in its turn), never while one is, live or
finished."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_ultjobs import Batch, Workflow, chain
from django_ultjobs.models import Batch as BatchRow
from django_ultjobs.models import Job
from django_ultjobs.models import Workflow as WorkflowRow
from django_ultjobs.store.retention import prune
from tests.testapp.jobs import wf_step

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def _finished(alias: str, ids: list[int], days_ago: float) -> None:
    """Finish ``ids`` as succeeded, ``days_ago`` days ago."""
    Job.objects.using(alias).filter(pk__in=ids).update(
        status="succeeded", finished_at=timezone.now() - timedelta(days=days_ago))


def _made(alias: str, days_ago: float) -> None:
    """Every batch and workflow made ``days_ago`` days ago."""
    at = timezone.now() - timedelta(days=days_ago)
    BatchRow.objects.using(alias).update(created_at=at)
    WorkflowRow.objects.using(alias).update(created_at=at)


def _batch(n: int) -> Batch:
    with Batch(on_finish=wf_step.call("done"), description="nightly") as batch:
        wf_step.bulk_enqueue([(f"m{i}",) for i in range(n)])
    return batch


def _jobs_of(batch: Batch) -> list[int]:
    return [*batch.member_ids, *batch.callback_ids.values()]


def test_a_group_goes_with_its_last_job(alias: str) -> None:
    # rule 151 (group-pruned-when-empty)
    batch = _batch(3)
    run = chain(wf_step.call("a"), wf_step.call("b")).enqueue()
    _finished(alias, [*_jobs_of(batch), *run.job_ids], days_ago=30)
    _made(alias, days_ago=30)
    pruned = prune(older_than=timedelta(days=14), using=alias, batch_size=2)
    assert (pruned.jobs, pruned.batches, pruned.workflows) == (6, 1, 1)
    assert not BatchRow.objects.using(alias).exists()
    assert not WorkflowRow.objects.using(alias).exists()


def test_a_group_with_a_job_left_is_kept(alias: str) -> None:
    # rule 151 (group-pruned-when-empty)
    # A member still queued, a callback not run yet (its members pruned), a node finished
    # yesterday: each keeps its group, whatever the group's age.
    live = _batch(2)
    _finished(alias, live.member_ids[:1], days_ago=30)
    waiting = _batch(2)
    _finished(alias, waiting.member_ids, days_ago=30)
    Job.objects.using(alias).filter(pk=waiting.callback_ids["on_finish"]).update(status="queued")
    recent = Workflow(name="recent")
    recent.add(wf_step.call("x"))
    run = recent.enqueue()
    _finished(alias, run.job_ids, days_ago=1)
    _made(alias, days_ago=30)
    pruned = prune(older_than=timedelta(days=14), using=alias)
    assert (pruned.jobs, pruned.batches, pruned.workflows) == (3, 0, 0)
    assert set(BatchRow.objects.using(alias).values_list("pk", flat=True)) == {
        live.id, waiting.id}
    assert WorkflowRow.objects.using(alias).filter(pk=run.id).exists()


def test_a_group_made_within_the_retention_is_kept(alias: str) -> None:
    # rule 151 (group-pruned-when-empty)
    # An empty batch has no job to wait for: its age alone says when it may go.
    with Batch() as empty:
        pass
    assert prune(older_than=timedelta(days=14), using=alias).batches == 0
    _made(alias, days_ago=30)
    assert prune(older_than=timedelta(days=14), using=alias).batches == 1
    assert not BatchRow.objects.using(alias).filter(pk=empty.id).exists()


def test_the_dry_run_counts_the_groups_the_prune_deletes(alias: str) -> None:
    gone, kept = _batch(2), _batch(2)
    _finished(alias, _jobs_of(gone), days_ago=30)
    _finished(alias, kept.member_ids, days_ago=30)
    _made(alias, days_ago=30)
    dry = StringIO()
    call_command("prunejobs", "--dry-run", "--days", "14", "--database", alias, stdout=dry)
    assert "1 batches and 0 workflows with no job left (dry run" in dry.getvalue(), dry.getvalue()
    assert BatchRow.objects.using(alias).count() == 2
    real = StringIO()
    call_command("prunejobs", "--days", "14", "--database", alias, stdout=real)
    assert "1 batches and 0 workflows with no job left" in real.getvalue(), real.getvalue()
    assert list(BatchRow.objects.using(alias).values_list("pk", flat=True)) == [kept.id]
