"""Retention of batches and workflows: a group's row goes once none of its jobs is left
(rule 151 (group-pruned-when-empty); docs/workflows.md).

A group gains jobs only in the transaction that writes its row (``Workflow.enqueue``, a
``Batch`` block), so one whose jobs are all gone stays empty: deleting it loses nothing a job, a
callback or a wait still reads. One with a job left, live or finished, is kept until that job is
pruned too; one made after the cut-off is kept whatever it holds (an empty batch holds nothing).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet

from ..models import FINISHED_STATUSES, Batch, Job, Workflow


def prune_groups(using: str, cutoff: datetime, limit: int) -> tuple[int, int]:
    """Delete the batches and workflows made before ``cutoff`` that no job belongs to any more,
    ``limit`` rows per short transaction; return how many batches and workflows went."""
    jobs = Job.objects.using(using)
    return (_delete(_left(Batch, using, cutoff, jobs), limit),
            _delete(_left(Workflow, using, cutoff, jobs), limit))


def prunable_groups(using: str, cutoff: datetime) -> tuple[int, int]:
    """How many batches and workflows a prune before ``cutoff`` would delete (a dry run): those
    with no job but the ones it would delete."""
    kept = Job.objects.using(using).exclude(status__in=FINISHED_STATUSES, finished_at__lt=cutoff)
    return (_left(Batch, using, cutoff, kept).count(),
            _left(Workflow, using, cutoff, kept).count())


def _left(model: type[Batch] | type[Workflow], using: str, cutoff: datetime,
          jobs: QuerySet[Job]) -> QuerySet[Any]:
    """The groups of ``model`` made before ``cutoff`` to which no job of ``jobs`` belongs (as a
    member, a callback or a node): one probe of a partial index per group and relation."""
    if model is Batch:
        return model.objects.using(using).filter(
            ~Exists(jobs.filter(batch_id=OuterRef("pk"))),
            ~Exists(jobs.filter(callback_of_id=OuterRef("pk"))), created_at__lt=cutoff)
    return model.objects.using(using).filter(
        ~Exists(jobs.filter(workflow_id=OuterRef("pk"))), created_at__lt=cutoff)


def _delete(groups: QuerySet[Any], limit: int) -> int:
    """Delete ``groups`` ``limit`` at a time, each batch its own short transaction and its
    condition read again by the delete itself; return how many went."""
    deleted = 0
    while ids := list(groups.order_by("pk").values_list("pk", flat=True)[:limit]):
        with transaction.atomic(using=groups.db):
            gone = groups.filter(pk__in=ids).delete()[0]
        if not gone:
            break
        deleted += gone
    return deleted
