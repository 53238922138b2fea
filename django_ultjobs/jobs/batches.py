"""Batches: every job enqueued in a ``with Batch(...)`` block, and callbacks that run when the
last of them finished for good (docs/workflows.md).

```python
with Batch(on_success=report.call(month), on_failure=alert.call(month),
           description="nightly import") as batch:
    for store_id in ids:
        import_store.enqueue(store_id)      # enqueue, bulk_enqueue, .using(...).enqueue
batch.wait()
```

The block is one transaction on the jobs database (a savepoint of the caller's, if one is
open): the members, the batch and its callbacks commit together when it ends, or not at all,
so no member can finish before its callbacks count it.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

from django.db import transaction

from ..exceptions import WorkflowError
from ..models import Batch as BatchRow
from ..models import Job
from ..store import get_store
from ..store.dependencies import GraphRow, write_graph_rows
from . import enqueue, waiting
from .spec import JobCall
from .workflows import checked_call

#: Callbacks by condition: on_success runs when every member succeeded, on_failure when every
#: member finished and one at least did not succeed, on_finish when every member finished.
CALLBACKS = (("on_success", "succeeded"), ("on_failure", "failed"), ("on_finish", "finished"))


class Batch:
    """A block whose enqueues are the batch's members; see the module's docstring."""

    def __init__(self, *, on_success: JobCall | None = None, on_failure: JobCall | None = None,
                 on_finish: JobCall | None = None, description: str = "") -> None:
        if not isinstance(description, str) or len(description) > 200:
            raise WorkflowError(f"Batch(): description must be text of at most 200 "
                                f"characters, not {description!r}")
        given = {"on_success": on_success, "on_failure": on_failure, "on_finish": on_finish}
        self._callbacks = [(checked_call(given[name], f"Batch({name}=...)"), when)
                           for name, when in CALLBACKS if given[name] is not None]
        self.description = description
        #: The ids of the members, in enqueue order.
        self.member_ids: list[int] = []
        #: The ids of the callbacks' jobs, by name (``on_success``...), once the block ended.
        self.callback_ids: dict[str, int] = {}
        self.row: BatchRow | None = None
        self.alias = ""
        self._atomic: Any = None
        self._members: Any = None

    @property
    def id(self) -> int:
        return self._row().pk

    def __enter__(self) -> Batch:
        if self.row is not None:
            raise WorkflowError("Batch: a batch's block runs once")
        if enqueue.collecting():
            raise WorkflowError("Batch: batches do not nest; end the open batch's block first")
        self.alias = get_store().alias
        self._atomic = transaction.atomic(using=self.alias)
        self._atomic.__enter__()
        try:
            self.row = BatchRow.objects.using(self.alias).create(description=self.description)
            self._members = enqueue.members_into(self.member_ids)
            self._members.__enter__()
        except BaseException:
            self._atomic.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool | None:
        self._members.__exit__(kind, exc, tb)
        if kind is None:
            try:
                self._seal()
            except BaseException:
                self._atomic.__exit__(*sys.exc_info())
                raise
        return self._atomic.__exit__(kind, exc, tb)

    def _seal(self) -> None:
        """Count the members, enqueue the callbacks as their dependents
        (rule 110 (released-in-settle))."""
        row = self._row()
        total = len(self.member_ids)
        BatchRow.objects.using(self.alias).filter(pk=row.pk).update(total=total)
        row.total = total
        # An empty batch: on_success and on_finish hold at once, on_failure never can.
        callbacks = [(call, when) for call, when in self._callbacks
                     if total or when != "failed"]
        ids = enqueue.bulk_enqueue(call for call, _ in callbacks)
        names = {when: name for name, when in CALLBACKS}
        self.callback_ids = {names[when]: job_id
                             for (_, when), job_id in zip(callbacks, ids, strict=True)}
        graph_rows = [GraphRow(m, has_dependents=bool(callbacks), batch_id=row.pk)
                      for m in self.member_ids]
        graph_rows += [GraphRow(job_id, pending=bool(total), total=total,
                                 when=when if total else "", callback_of=row.pk)
                       for (_, when), job_id in zip(callbacks, ids, strict=True)]
        store = get_store(self.alias)
        with store.cursor() as cur:
            write_graph_rows(store, cur, graph_rows)

    def _row(self) -> BatchRow:
        if self.row is None:
            raise WorkflowError("Batch: use it as a with block first")
        return self.row

    def finished(self) -> bool:
        """Whether every member and every callback finished for good."""
        return waiting.batch_finished(self.alias, self._row().pk)

    def wait(self, timeout: float | None = None) -> BatchRow:
        """Block until every member and every callback finished for good; return the batch's
        row. Raises ``TimeoutError`` past ``timeout`` seconds (rule 116 (wait-for-result))."""
        return waiting.wait_batch(self._row(), timeout)

    async def wait_async(self, timeout: float | None = None) -> BatchRow:
        """``wait`` for async code."""
        result: BatchRow = await waiting.run_closing(self.wait)(timeout)
        return result


def batch_results(batch_id: int, alias: str) -> Any:
    """The results of batch ``batch_id``'s members in enqueue order (None for one that did not
    succeed), read in chunks as they are iterated: a batch may have a million members."""
    return (Job.objects.using(alias).filter(batch_id=batch_id).order_by("id")
            .values_list("result", flat=True).iterator(chunk_size=2000))
