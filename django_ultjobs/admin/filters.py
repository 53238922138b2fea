"""List filters whose choices cost nothing on a table of millions of rows.

Django's default filter for a plain field lists its distinct values with ``SELECT DISTINCT``
over the whole table: a scan of every row to draw a sidebar. These take their choices from
what the process already knows (the registered jobs, the workers' queues) instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db import connections
from django.db.models import Q, QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from ..conf import jobs_database
from ..core.slot_keys import slot_key_for
from ..core.tags import tagged
from ..jobs.registry import registered_jobs
from ..models import JobStatus, Worker
from .display import breakable

#: The statuses the status index holds (``ultjobs_job_status``), as its predicate lists them.
INDEXED_STATUSES = [JobStatus.FAILED.value, JobStatus.CANCELLED.value]


def _choices(values: Iterable[str], current: str | None) -> list[tuple[str, SafeString]]:
    # The current value is always offered, so a filter set by a link (a job name no worker
    # registers any more, after a deploy) still shows as selected and can be cleared.
    found = {v for v in values if v}
    if current:
        found.add(current)
    return [(v, breakable(v)) for v in sorted(found)]


class ValuesFilter(admin.AllValuesFieldListFilter):
    """Django's filter of a field's distinct values, its choices wrapping at their separators
    only (job names, worker ids): the filter panel is narrow, and Django breaks them anywhere."""

    def choices(self, changelist: Any) -> Iterator[dict[str, Any]]:
        """Django's choices, each label made breakable."""
        for choice in super().choices(changelist):
            yield {**choice, "display": breakable(str(choice["display"]))}


class StatusFilter(admin.ChoicesFieldListFilter):
    """Django's filter of the status choices; failed and cancelled jobs read from their own
    index in id order (``ultjobs_job_status``)."""

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """The jobs in the chosen status, stating the index's own predicate on SQLite, which
        uses a partial index only for a query whose terms state it. PostgreSQL infers it, and
        its estimate of the page's count would multiply the two terms' selectivities."""
        filtered = super().queryset(request, queryset)
        chosen = self.lookup_val or []
        if chosen and set(chosen) <= set(INDEXED_STATUSES) \
                and connections[filtered.db].vendor == "sqlite":
            filtered = filtered.filter(status__in=INDEXED_STATUSES)
        return filtered


class JobNameFilter(admin.SimpleListFilter):
    """Filter jobs by name; the choices are the registered jobs (no scan of the table)."""

    title = _("name")
    parameter_name = "name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, SafeString]]:
        """Offer every job registered in this process."""
        return _choices(registered_jobs(), self.value())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the jobs of the chosen name (the ``(name, status)`` index)."""
        value = self.value()
        return queryset.filter(name=value) if value else queryset


class QueueFilter(admin.SimpleListFilter):
    """Filter jobs by queue; choices from the registered jobs and the workers' queues."""

    title = _("queue")
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, SafeString]]:
        """Offer the queues jobs are sent to and the queues workers were seen serving."""
        queues = {spec.queue for spec in registered_jobs().values()}
        # The worker table holds a row per worker process: small, unlike the jobs table.
        for served in (Worker.objects.using(jobs_database())
                       .filter(last_seen_at__gte=Now() - timedelta(days=7))
                       .values_list("queues", flat=True)[:500]):
            queues.update(q for q in served or () if isinstance(q, str))
        return _choices(queues, self.value())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the jobs of the chosen queue."""
        value = self.value()
        return queryset.filter(queue=value) if value else queryset


class SlotKeyFilter(admin.SimpleListFilter):
    """Filter lost-slot cancellations by slot key; choices from the jobs that declare a cap."""

    title = _("slot key")
    parameter_name = "slot_key"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, SafeString]]:
        """Offer the slot key of every registered job with ``concurrency`` (rule 5 (fleet-cap))."""
        return _choices((slot_key_for(name) for name, spec in registered_jobs().items()
                         if spec.concurrency is not None), self.value())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the lost slots of the chosen key."""
        value = self.value()
        return queryset.filter(slot_key=value) if value else queryset


class LeaseFilter(admin.SimpleListFilter):
    """Filter jobs by where their one clock (``visible_at``) stands against the database's."""

    title = _("lease")
    parameter_name = "lease"

    CONDITIONS: dict[str, Q] = {
        # Running with a live lease: a worker is heartbeating it right now.
        "in_flight": Q(status=JobStatus.RUNNING, visible_at__gt=Now()),
        # Running but the lease lapsed: its worker died, the next claim re-delivers it
        # (rule 1 (leased-claim)).
        "lapsed": Q(status=JobStatus.RUNNING, visible_at__lte=Now()),
        # Claimable now: what the claim would take next.
        "runnable": Q(status__in=(JobStatus.QUEUED, JobStatus.WAITING), visible_at__lte=Now()),
        # Queued for later: a delayed enqueue or a retry's backoff.
        "delayed": Q(status=JobStatus.QUEUED, visible_at__gt=Now()),
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        """Offer in flight, lapsed, runnable and delayed."""
        return [
            ("in_flight", _("in flight (live lease)")),
            ("lapsed", _("lapsed (awaiting re-delivery)")),
            ("runnable", _("runnable now")),
            ("delayed", _("delayed (not yet visible)")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the jobs in the chosen state of their lease."""
        condition = self.CONDITIONS.get(self.value() or "")
        return queryset.filter(condition) if condition is not None else queryset


class LapsedFilter(admin.SimpleListFilter):
    """Filter held slots by whether their hold has lapsed."""

    title = _("lapsed")
    parameter_name = "lapsed"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        """Offer held and lapsed."""
        return [("no", _("no: held")), ("yes", _("yes: lapsed, free to take"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the slots whose expiry is ahead of (or behind) the database's clock."""
        if self.value() == "no":
            return queryset.filter(expires_at__gt=Now())
        if self.value() == "yes":
            return queryset.filter(expires_at__lte=Now())
        return queryset


class SinceFilter(admin.SimpleListFilter):
    """Filter rows by how recent a timestamp is; the timestamp field is set by subclasses."""

    title = _("when")
    parameter_name = "since"
    field = "finished_at"
    #: The choice applied when the URL has none (None: everything).
    default: str | None = None
    WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        """Offer the last hour, day and week, and everything."""
        return [("1h", _("last hour")), ("24h", _("last 24 hours")), ("7d", _("last 7 days")),
                ("all", _("any time"))]

    def value(self) -> str | None:
        """Return the chosen window, or the default when none was chosen."""
        return super().value() or self.default

    def choices(self, changelist: Any) -> Any:
        """List the windows, without Django's "All" (``any time`` is one of them)."""
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.value() == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the rows inside the chosen window of the database's clock."""
        window = self.WINDOWS.get(self.value() or "")
        if window is None:
            return queryset
        return queryset.filter(**{f"{self.field}__gte": Now() - window})


class WorkerSeenFilter(SinceFilter):
    """Workers seen recently: the last day by default, since a row is kept per process ever run."""

    title = _("last seen")
    parameter_name = "seen"
    field = "last_seen_at"
    default = "24h"


class TagFilter(admin.SimpleListFilter):
    """Keep the jobs carrying a tag (rule 78 (tags-stored-whole)): ``?tag=customer:42``.

    No choices in the sidebar: tags are the site's own labels, and listing them would read the
    whole table. A job's page links each of its tags to this filter."""

    title = _("tag")
    parameter_name = "tag"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """Offer the tag filtered on, so the sidebar shows what narrows the list."""
        value = self.value()
        return [(value, value)] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the jobs whose tags hold the chosen one."""
        value = self.value()
        return tagged(queryset, value) if value else queryset
