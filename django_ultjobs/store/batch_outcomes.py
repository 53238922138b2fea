"""Which batches a transaction finished, for the ``ultjobs.batches.finished`` metric
(docs/operations.md): read on the caller's cursor, in the transaction that finished their last
member, so two workers settling a batch's last two members count it once between them.

Read only when an OpenTelemetry SDK is configured (rule 70 (no-sdk-no-metrics)). A batch's
callbacks hold its counters (rule 113 (constant-bookkeeping)), so a batch is finished when they
count every member: a batch with no callback keeps no counter and is not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..models import Job
from ..observability import metrics
from .base import JobStore


def count_finished(store: JobStore, cur: Any, job_ids: Sequence[int]) -> None:
    """Count the batches whose last member is among ``job_ids`` (just finished for good and
    counted on their callbacks), by outcome: ``succeeded`` when every member succeeded, else
    ``failed``."""
    if not job_ids or not metrics.enabled():
        return
    table = Job._meta.db_table
    # The ids are the database's own integers, written inline: one text on both engines.
    ids = ",".join(str(int(i)) for i in job_ids)
    cur.execute(
        f"SELECT callback_of_id, MAX(deps_failed) FROM {table} "
        f"WHERE callback_of_id IN (SELECT batch_id FROM {table} WHERE id IN ({ids}) "
        "AND batch_id IS NOT NULL) AND deps_done = deps_total GROUP BY callback_of_id")
    outcomes = ["failed" if failed else "succeeded" for _, failed in cur.fetchall()]
    metrics.record_batches_finished(outcomes, store.alias)
