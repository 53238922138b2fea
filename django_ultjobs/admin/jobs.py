"""The jobs pages: every job with its page, and the in-flight view. Their columns are in
``job_list.py``, the job page's tables and words in ``job_page.py``, the actions in
``job_actions.py``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..conf import jobs_database
from ..models import LIVE_STATUSES, InFlightJob, Job, JobStatus, JobStep
from .base import JobsAdmin
from .dependencies import (
    BatchFilter,
    DependencyFields,
    WorkflowFilter,
    cancelled_by_text,
    waits_for_text,
)
from .display import error_block, parse_job_id, stamp, worker_link
from .filters import (
    JobNameFilter,
    LeaseFilter,
    QueueFilter,
    StatusFilter,
    TagFilter,
    ValuesFilter,
)
from .job_actions import FROM_DETAIL, cancel_selected, retry_keyless, retry_selected
from .job_list import JobListMixin, is_expired, lease_text, stamp_field
from .job_page import (
    JSON_FIELDS,
    AttemptInline,
    StepInline,
    earlier_attempt_note,
    json_column,
    overrunning_on,
    running_text,
)
from .runners import runner_text, with_runners


@admin.register(Job)
class JobAdmin(DependencyFields, JobListMixin, JobsAdmin):
    """Every job: filter by status, queue, name and lease; cancel and retry."""

    list_display = ("job_id", "status_display", "name_display", "queue", "attempt_of_max",
                    "worker", "lease", "progress_display", "enqueued_by_display", "age")
    list_display_links = None
    list_filter = (("status", StatusFilter), LeaseFilter, QueueFilter, JobNameFilter, TagFilter,
                   BatchFilter, WorkflowFilter)
    # Newest first by primary key: a backward scan of the primary key index, whatever the size.
    ordering = ("-id",)
    # Sorting by another column would sort the whole table to show 50 rows.
    sortable_by = ("job_id",)
    actions = (cancel_selected, retry_selected, retry_keyless)
    inlines = (AttemptInline, StepInline)
    offers_charts = True
    readonly_fields = ("status_display", "attempt_of_max", "worker", "lease", "args_display",
                       "kwargs_display", "result_display", "last_error_display", "claimed",
                       "visible", "created", "updated", "finished", "outcome", "unique_key",
                       "released_key",
                       "expires", "progress_display", "tags_display",
                       *DependencyFields.dependency_fields)
    claimed = stamp_field("claimed_at", _("claimed"))
    visible = stamp_field("visible_at", _("visible at (the lease clock)"))
    created = stamp_field("created_at", _("enqueued"))
    updated = stamp_field("updated_at", _("updated"))
    finished = stamp_field("finished_at", _("finished"))
    expires = stamp_field("expires_at", _("expires unless started"))

    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> Any:
        """Lay out a job's page with what an operator looks for first: state, outcome, error.

        The lease clock (``visible_at``) is shown only while it means something: when a queued
        job may run, when a running job's lease expires, when a waiting one wakes. On a finished
        job it is the last heartbeat's leftover, and "in 17 s" would read as a run to come.
        """
        live = obj is None or obj.status in LIVE_STATUSES
        state = ["status_display", "outcome", "attempt_of_max", "progress_display", "name",
                 "queue", "tags_display", "id"]
        if obj is not None and obj.last_error:
            state.insert(2, "last_error_display")
        lease = ("worker", "claimed", "lease", "visible", "wait_event") if live else \
            ("worker", "claimed", "finished")
        call = ["args_display", "kwargs_display", "priority", "timeout", "expires",
                "cancel_requested", "cancel_reason"]
        if obj is not None and obj.unique_key:
            # The key it holds (rule 66 (held-key-returns-holder)): why an enqueue returned this job
            # instead of a new one.
            call.append("unique_key")
        if obj is not None and obj.released_key:
            # The key a later enqueue took over: what a retry of this job checks
            # (rule 107 (retry-takes-key-back)).
            call.append("released_key")
        graph = ((_("Dependencies"), {"fields": self.dependency_fields}),) \
            if self.has_graph(obj) else ()
        return (
            (None, {"fields": state}),
            *graph,
            (_("Lease") if live else _("Last run"), {"fields": lease}),
            (_("Call"), {"fields": call}),
            # Folded (a <details>): who enqueued it and under which trace is looked up, not
            # read first, and it made the page a screen longer.
            (_("Origin"), {"classes": ("collapse",),
                        "fields": ("enqueued_by", "traceparent", "tracestate", "created",
                                   "updated")}),
        )

    def get_inlines(self, request: HttpRequest, obj: Job | None) -> Any:
        """The attempts, and the steps only for a job that has some (most have none)."""
        if obj is not None and not JobStep.objects.using(jobs_database()).filter(
                job_id=obj.pk).exists():
            return (AttemptInline,)
        return self.inlines

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """Show the job read-only, with cancel/retry buttons for users who may act."""
        if not self.has_view_permission(request):
            raise PermissionDenied  # before the id is read, as on every jobs page
        context = {
            "ultjobs_can_act": self.has_change_permission(request),
            "ultjobs_from_detail": FROM_DETAIL,
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, context)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """The jobs without their JSON columns: a job's page reads each on its own
        (rule 15 (undecodable-row-fails-alone))."""
        return super().get_queryset(request).defer(*JSON_FIELDS)

    @admin.display(description=_("args"))
    def args_display(self, obj: Job) -> SafeString | str:
        """Positional arguments, escaped and cut past 10,000 characters."""
        return json_column(obj, "args")

    @admin.display(description=_("kwargs"))
    def kwargs_display(self, obj: Job) -> SafeString | str:
        """Keyword arguments, escaped and cut past 10,000 characters."""
        return json_column(obj, "kwargs")

    @admin.display(description=_("result"))
    def result_display(self, obj: Job) -> SafeString | str:
        """The stored result (after success), escaped and cut."""
        return json_column(obj, "result")

    @admin.display(description=_("outcome"))
    def outcome(self, obj: Job) -> SafeString | str:
        """What became of the job, in words: its result, why it stopped, or what comes next."""
        if obj.status == JobStatus.SUCCEEDED:
            return self.result_display(obj)
        if obj.status == JobStatus.FAILED:
            return ngettext("failed after %(count)d attempt: no retry left",
                            "failed after %(count)d attempts: no retry left",
                            obj.attempt) % {"count": obj.attempt}
        if is_expired(obj):
            return gettext("expired: not started by %(when)s, never run") % {
                "when": stamp(obj.expires_at)}
        if obj.status == JobStatus.PENDING:
            return waits_for_text(obj)
        cut = cancelled_by_text(obj)
        if cut:
            return cut
        if obj.status == JobStatus.CANCELLED and obj.cancel_requested:
            if obj.cancel_reason:
                return gettext("cancelled on request: %(reason)s") % {
                    "reason": obj.cancel_reason}
            return gettext("cancelled on request")
        if obj.status == JobStatus.CANCELLED:
            return gettext("cancelled")
        overrunning = overrunning_on(obj)
        if overrunning:
            return overrunning
        if obj.status == JobStatus.RUNNING:
            return running_text(obj)
        return lease_text(obj)

    @admin.display(description=_("last error"))
    def last_error_display(self, obj: Job) -> SafeString | str:
        """The exception line of the last error, the traceback expandable; on a job that did
        not fail, said to be an earlier attempt's (it reads as the outcome otherwise)."""
        note = earlier_attempt_note(obj)
        if not note:
            return error_block(obj.last_error)
        return format_html('<p class="ultjobs-earlier">{}</p>{}', note,
                           error_block(obj.last_error))


@admin.register(InFlightJob)
class InFlightJobAdmin(JobListMixin, JobsAdmin):
    """Running jobs with a live lease: what the fleet is doing right now."""

    permission_model = Job
    offers_refresh = True
    list_display = ("job_id", "name_display", "queue", "attempt_of_max", "worker", "running_for",
                    "lease", "progress_display", "cancel", "enqueued_by_display")
    list_display_links = None
    # Django's own value filters, because they list distinct values of THIS page's queryset:
    # the running rows, a few hundred at most, never the whole table.
    list_filter = (("queue", ValuesFilter), ("name", ValuesFilter), ("worker_id", ValuesFilter),
                   TagFilter)
    ordering = ("-id",)
    sortable_by = ("job_id",)
    actions = (cancel_selected,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """Running rows whose lease is still ahead of the database's clock, each with the child
        process that runs it (``--pool process``)."""
        return with_runners(super().get_queryset(request).filter(
            LeaseFilter.CONDITIONS["in_flight"]))

    @admin.display(description=_("worker"))
    def worker(self, obj: Job) -> SafeString | str:
        """The worker running the job, linked, and under ``--pool process`` the child process
        that runs it (``child 1234``): in the worker's cell, as a column of its own made the
        list wider than a laptop's window for every worker."""
        link = worker_link(obj.worker_id)
        child = runner_text(obj)
        if child is None:
            return link
        return format_html('{} <span class="ultjobs-runner">{}</span>', link, child)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """Show the job's own page: one detail page per job, whichever list led there."""
        # Refused before the id is read: a staff user without permissions learns nothing from
        # this URL, not even that it parses.
        if not self.has_view_permission(request):
            raise PermissionDenied
        job_id = parse_job_id(object_id)
        if job_id is None:
            return HttpResponseRedirect(reverse("admin:django_ultjobs_inflightjob_changelist"))
        return HttpResponseRedirect(reverse("admin:django_ultjobs_job_change", args=[job_id]))
