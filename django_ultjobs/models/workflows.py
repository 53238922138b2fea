"""The groups of dependent jobs: workflows and batches (docs/workflows.md,
rules 110 (released-in-settle) to 118 (bad-graph-refused)).

The edges live on the jobs' own rows (``Job.depends_on``, ``Job.dependents``), and a dependent
holds its own counters (``deps_total``, ``deps_done``, ``deps_failed``): the settle of a
dependency reads its own row for its dependents and changes one row per dependent, never counts
over a graph or a batch, and a graph's enqueue writes no table but the jobs'.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

#: How a batch's or a workflow's row waits (``row.wait()``): set by ``jobs.waiting``, a layer
#: above the models, which the app loads when it is ready.
group_waiters: dict[str, Callable[..., Any]] = {}


class Workflow(models.Model):
    """A graph of jobs enqueued together (``Workflow(...).enqueue()``, ``chain(...)``)."""

    id = models.BigAutoField(primary_key=True)
    #: Shown in the admin; optional.
    name = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name = _("workflow")
        verbose_name_plural = _("workflows")

    def __str__(self) -> str:
        return f"workflow {self.pk}" + (f" {self.name!r}" if self.name else "")

    def wait(self, timeout: float | None = None) -> list[Any]:
        """Block until every job of the workflow finished for good; return them, in the order
        they were added. Raises ``TimeoutError`` past ``timeout`` seconds (docs/workflows.md)."""
        return group_waiters["workflow"](self, timeout)

    async def wait_async(self, timeout: float | None = None) -> list[Any]:
        """``wait`` for async code."""
        return await group_waiters["workflow_async"](self, timeout)


class Batch(models.Model):
    """Jobs enqueued in one ``with Batch(...)`` block, and the callbacks their finish releases."""

    id = models.BigAutoField(primary_key=True)
    description = models.CharField(max_length=200, blank=True, default="")
    #: How many members the block enqueued (written when the block ends).
    total = models.IntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name = _("batch")
        verbose_name_plural = _("batches")

    def __str__(self) -> str:
        return f"batch {self.pk}" + (f" {self.description!r}" if self.description else "")

    def wait(self, timeout: float | None = None) -> Batch:
        """Block until every member and every callback finished for good; return this row.
        Raises ``TimeoutError`` past ``timeout`` seconds (docs/workflows.md)."""
        return group_waiters["batch"](self, timeout)

    async def wait_async(self, timeout: float | None = None) -> Batch:
        """``wait`` for async code."""
        return await group_waiters["batch_async"](self, timeout)
