"""The Django-shaped job's table, in every Django-based system's database.

The app has no migrations on purpose: ``migrate --run-syncdb`` creates this one table in each
system's fresh database, and the project's migration numbering stays the library's.
"""

from __future__ import annotations

from django.db import models


class PeersRecord(models.Model):
    """One row per Django-shaped job: what a typical job body writes, then reads back."""

    seq = models.IntegerField()
    payload = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "ultjobs_bench_peers"


def django_job_body(seq: int) -> None:
    """One ORM insert and one ORM read, in autocommit as a job body runs them."""
    record = PeersRecord.objects.create(seq=seq, payload=f"record {seq}")
    PeersRecord.objects.get(pk=record.pk)
