"""Runs settling: their bodies have returned, their settles are not written yet
(rule 91 (settling-shown)).

A fleet slot passes on once its run's body has returned (rule 90 (slot-passes-on-return)), so a
settling run holds its job (``running``, its lease heartbeated) but no slot, and is not counted
against its cap. The database does not say which running job is settling: nothing is written when a
body returns, or the slot would cost the statement its handoff saves. The admin counts them instead,
per worker and slot key, as that worker's running jobs of the key beyond the live slots it holds:
every executing body holds one. Exact for a cap per key, whose slots are never kept; for a cap
per job, a slot its worker keeps idle between runs (a poll interval at most) hides one.
"""

from __future__ import annotations

from collections import Counter

from django.db.models import Count
from django.db.models.functions import Now

from ..core.slot_keys import slot_key_for
from ..jobs.registry import registered_jobs
from ..models import LIVE_STATUSES, Job, JobStatus, Slot
from .display import split_holder


def settling_by_key(alias: str) -> dict[str, int]:
    """The runs settling per slot key (keys with none left out), in two queries (none when no
    registered job is capped)."""
    caps = {name: spec for name, spec in registered_jobs().items() if spec.concurrency}
    if not caps:
        return {}
    running: Counter[tuple[str, str]] = Counter()
    # The live statuses spelled out as the claim's partial index has them, so both engines read
    # the live rows only, however many finished ones the table holds
    # (rule 82 (fixed-query-summary)).
    rows = (Job.objects.using(alias).filter(status__in=LIVE_STATUSES)
            .filter(status=JobStatus.RUNNING, visible_at__gt=Now(), name__in=list(caps))
            .values("worker_id", "name", "concurrency_key").order_by().annotate(n=Count("id")))
    for row in rows:
        per_key = row["concurrency_key"] and caps[row["name"]].concurrency_key is not None
        key = row["concurrency_key"] if per_key else slot_key_for(row["name"])
        running[(row["worker_id"], key)] += row["n"]
    # Every live slot, whatever the running rows: the same two queries whatever the tables hold
    # (rule 82 (fixed-query-summary)), and live slots are bounded by the fleet's threads and the
    # slots it keeps.
    held: Counter[tuple[str, str]] = Counter()
    slots = Slot.objects.using(alias).filter(expires_at__gt=Now()).values_list("key", "holder")
    for key, holder in slots:
        held[(split_holder(holder)[0], key)] += 1
    settling: Counter[str] = Counter()
    for (worker, key), n in running.items():
        settling[key] += max(0, n - held[(worker, key)])
    return {key: n for key, n in settling.items() if n}
