"""The fleet-slot pages: who holds each slot now, and which runs were cancelled for losing one."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.db.models import (
    BooleanField,
    Case,
    Count,
    F,
    OuterRef,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Now, Substr
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..conf import jobs_database
from ..core.slot_keys import slot_key_for, split_slot_key
from ..jobs.registry import registered_jobs
from ..models import AttemptRecord, HeldSlot, Job, JobAttempt, JobStatus, LostSlotCancellation, Slot
from .base import JobsAdmin
from .display import (
    EMPTY,
    ago,
    breakable,
    duration,
    job_link,
    seconds_between,
    split_holder,
    worker_link,
)
from .filters import LapsedFilter, SinceFilter, SlotKeyFilter, ValuesFilter
from .settling import settling_by_key


@admin.register(HeldSlot)
class HeldSlotAdmin(JobsAdmin):
    """Every slot row: one held (or lapsed, not yet taken over) fleet slot (rule 5 (fleet-cap))."""

    permission_model = Slot
    rows_have_pages = False
    offers_refresh = True
    list_display = ("key_display", "job_key", "cap", "slot", "holder_worker", "holder_job",
                    "acquired", "expires", "lapsed", "runs_waiting")
    list_display_links = None
    list_filter = (LapsedFilter, ("key", ValuesFilter))
    ordering = ("key", "slot")
    search_fields = ("key", "holder")
    search_help_text = _("Part of a slot key (job:<name>, or key:<length>:<name>:<key> for a cap "
                         "per key) or of a holder (<worker id>:<job id>).")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """Every slot row, with whether it lapsed by the database's clock."""
        # Runnable queued runs of the key's job: with every slot held, they wait for one. An
        # index lookup on (name, status) per row of the page.
        waiting = (Job.objects.filter(name=Substr(OuterRef("key"), len(slot_key_for("")) + 1),
                                      status=JobStatus.QUEUED, visible_at__lte=Now())
                   .order_by().values("name").annotate(n=Count("id")).values("n")[:1])
        # Lapsed by the database's clock, the one the renewal is fenced on
        # (rule 7 (fenced-slot-renewal)).
        return super().get_queryset(request).annotate(
            is_lapsed=Case(When(expires_at__lte=Now(), then=Value(True)),
                           default=Value(False), output_field=BooleanField()),
            waiting=Coalesce(Subquery(waiting), 0))

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> Any:
        """The rows, and the runs settling per key above them: they hold no row
        (rule 91 (settling-shown))."""
        settling = sorted(settling_by_key(jobs_database()).items())
        return super().changelist_view(request, {"ultjobs_settling": settling,
                                                 **(extra_context or {})})

    @admin.display(description=_("key"), ordering="key")
    def key_display(self, obj: Slot) -> SafeString:
        """The slot's key (``job:<name>``), wrapping at its separators only."""
        return breakable(obj.key)

    @admin.display(description=_("job and key"))
    def job_key(self, obj: Slot) -> SafeString:
        """The job the slot caps, and its concurrency key when the cap is per key
        (rule 50 (per-key-cap))."""
        name, key = split_slot_key(obj.key)
        if key is None:
            return breakable(gettext("%(job)s (per job)") % {"job": name})
        return breakable(gettext("%(job)s, key %(key)s") % {"job": name, "key": key})

    @admin.display(description=_("cap"))
    def cap(self, obj: Slot) -> str:
        """The ``concurrency`` of the slot's job (per key with ``concurrency_key``), as this
        process registers the job."""
        name, _key = split_slot_key(obj.key)
        spec = registered_jobs().get(name) if name != obj.key else None
        if spec is None or not spec.concurrency:
            return EMPTY
        if spec.concurrency_key is not None:
            return gettext("%(cap)s per key") % {"cap": spec.concurrency}
        return str(spec.concurrency)

    @admin.display(description=_("runs waiting"))
    def runs_waiting(self, obj: Slot) -> SafeString | str:
        """How many runs of the slot's job (of its key, for a cap per key) are runnable now:
        with every slot held, they wait."""
        name, key = split_slot_key(obj.key)
        if key is None:
            count = getattr(obj, "waiting", 0) or 0
        else:
            # Per key: the job's runnable rows (its claim index) of this key, for this row only.
            count = Job.objects.using(obj._state.db).filter(
                name=name, concurrency_key=obj.key, status=JobStatus.QUEUED,
                visible_at__lte=Now()).count()
        if not count:
            return "0"
        url = reverse("admin:django_ultjobs_job_changelist")
        query = urlencode({"name": name, "lease": "runnable"})
        return format_html('<a href="{}?{}">{}</a>', url, query, count)

    @admin.display(description=_("holder (worker)"))
    def holder_worker(self, obj: Slot) -> SafeString | str:
        """The worker holding the slot, linked to its page."""
        return worker_link(split_holder(obj.holder)[0])

    @admin.display(description=_("taken for job"))
    def holder_job(self, obj: Slot) -> SafeString | str:
        """The job whose run took the slot, linked to its page. The worker passes a slot on to
        its next runs of the kind while it has them, so a later run may be using it now."""
        return job_link(split_holder(obj.holder)[1])

    @admin.display(description=_("acquired"), ordering="acquired_at")
    def acquired(self, obj: Slot) -> str:
        """When this holder took the slot."""
        return ago(obj.acquired_at, getattr(obj, "db_now", None))

    @admin.display(description=_("expires"), ordering="expires_at")
    def expires(self, obj: Slot) -> str:
        """``in 12 s`` while held; ``3 s ago`` once lapsed."""
        ahead = seconds_between(getattr(obj, "db_now", None), obj.expires_at)
        if ahead is None:
            return EMPTY
        when = {"duration": duration(ahead)}
        if ahead > 0:
            return gettext("in %(duration)s") % when
        return gettext("%(duration)s ago") % when

    @admin.display(description=_("lapsed"), ordering="is_lapsed")
    def lapsed(self, obj: Slot) -> SafeString | str:
        """Whether the hold lapsed: the slot is free, and its old holder can never renew it."""
        # Words, not Django's boolean icons: a red icon on every healthy "not lapsed" row
        # would read as an alarm.
        if getattr(obj, "is_lapsed", False):
            return format_html('<span class="ultjobs-flag">{}</span>', gettext("yes: free to take"))
        return gettext("no")


class LostSlotSinceFilter(SinceFilter):
    """Lost-slot cancellations by when they happened; the last 7 days unless told otherwise."""

    default = "7d"


@admin.register(LostSlotCancellation)
class LostSlotCancellationAdmin(JobsAdmin):
    """Runs cancelled because they lost their fleet slot (rule 8 (lost-slot-cancels)), and what
    became of the job."""

    permission_model = Job
    rows_have_pages = False
    list_display = ("when", "job_display", "worker", "slot_held", "attempt", "then")
    list_display_links = None
    list_filter = (LostSlotSinceFilter, SlotKeyFilter)
    # The partial index of slot_lost attempts answers the page: newest lost slots first.
    ordering = ("-finished_at", "-id")
    sortable_by = ("when",)
    search_fields = ("worker_id",)
    search_help_text = _("Part of a worker id.")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Nothing to act on here: a lost slot is history (its job has its own actions)."""
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """Attempts with outcome slot_lost, with their job's status and its later attempts."""
        # Read through the attempts view: a success after the lost slot may have no row of its
        # own (rule 97 (attempt-on-row)).
        later = AttemptRecord.objects.filter(job_id=OuterRef("job_id"), id__gt=OuterRef("id"))
        return (
            super().get_queryset(request)
            .filter(outcome="slot_lost")
            .annotate(
                job_name=F("job__name"),
                job_status=F("job__status"),
                # Index lookups per row on (job, attempt): a page costs 2 x 50 of them.
                later_attempts=Coalesce(Subquery(
                    later.order_by().values("job_id").annotate(n=Count("id")).values("n")[:1]),
                    0),
                next_outcome=Subquery(later.order_by("id").values("outcome")[:1]),
            )
        )

    @admin.display(description=_("when"), ordering="finished_at")
    def when(self, obj: JobAttempt) -> str:
        """How long ago the run was cancelled."""
        return ago(obj.finished_at, getattr(obj, "db_now", None))

    @admin.display(description=_("job"))
    def job_display(self, obj: JobAttempt) -> SafeString | str:
        """The job, linked to its page (where all its attempts are)."""
        return job_link(obj.job_id, breakable(f"{getattr(obj, 'job_name', '')}#{obj.job_id}"))

    @admin.display(description=_("worker"))
    def worker(self, obj: JobAttempt) -> SafeString | str:
        """The worker whose run lost the slot."""
        return worker_link(obj.worker_id)

    @admin.display(description=_("slot"))
    def slot_held(self, obj: JobAttempt) -> SafeString | str:
        """The lost slot, ``key[slot]``."""
        return breakable(f"{obj.slot_key}[{obj.slot}]") if obj.slot_key else EMPTY

    @admin.display(description=_("then"))
    def then(self, obj: JobAttempt) -> SafeString | str:
        """What happened to the job next: its status now, and the attempts after this one."""
        later = getattr(obj, "later_attempts", 0) or 0
        if not later:
            # A lost slot hands the job straight back to the queue, its attempt not burned.
            return format_html(gettext("job is <b>{status}</b>; no attempt since"),
                               status=obj.job_status)
        return format_html(
            ngettext("job is <b>{status}</b>; {count} later attempt, the next one {outcome}",
                     "job is <b>{status}</b>; {count} later attempts, the next one {outcome}",
                     later),
            status=obj.job_status, count=later, outcome=obj.next_outcome)
