"""The jobs pages: every job, the in-flight view, a job's detail, and the cancel/retry actions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.functional import Promise
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import capfirst
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..conf import jobs_database
from ..jobs.registry import registered_jobs
from ..jobs.unique import KeyHeld
from ..models import (
    LIVE_STATUSES,
    AttemptRecord,
    InFlightJob,
    Job,
    JobStatus,
    JobStep,
    Worker,
)
from ..operations import MAX_CANCEL_REASON, cancel_jobs, retry_jobs
from ..runtime.progress import progress_text
from .base import JobsAdmin, ReadOnlyInline, actor
from .dependencies import (
    BatchFilter,
    DependencyFields,
    WorkflowFilter,
    cancelled_by_text,
    waits_for_text,
)
from .display import (
    EMPTY,
    MAX_SHOWN_INLINE,
    breakable,
    duration,
    error_block,
    job_link,
    parse_job_id,
    pretty_json,
    run_time,
    seconds_between,
    stamp,
    undecodable,
    worker_link,
)
from .filters import JobNameFilter, LeaseFilter, QueueFilter, TagFilter, ValuesFilter

#: Columns a list never shows and a page of 50 rows must not fetch: a job called with a 5 MB
#: document would otherwise cost 5 MB per row on every page view.
HEAVY_FIELDS = ("args", "kwargs", "result", "last_error", "wait_match", "depends_on",
                "dependents")
#: The JSON columns a job's page reads one at a time, each surviving a value it cannot decode: a
#: row written by raw SQL or another producer (too deep, an integer too long, not UTF-8) must not
#: take the page that shows why it failed down with it (rule 15 (undecodable-row-fails-alone)).
JSON_FIELDS = ("args", "kwargs", "result", "wait_match")
#: Ids per LogEntry batch when an action touched many jobs.
LOG_CHUNK = 500
#: Jobs a retry's message names whose key another job holds, at most.
LISTED_HELD = 10
#: Posted by the buttons on a job's page: the action then returns to that page.
FROM_DETAIL = "_ultjobs_from_detail"


class LightChangeList(ChangeList):
    """A changelist that leaves the payload columns in the database."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        """Return the filtered rows without their payloads."""
        return super().get_queryset(request, exclude_parameters).defer(*HEAVY_FIELDS)


# -- columns shared by the jobs pages -------------------------------------------------------------


def stamp_field(field: str, description: str | Promise) -> Callable[[Any, Any], str]:
    """Return a display method showing ``field`` to the second, and how long ago it was."""
    @admin.display(description=description, ordering=field)
    def show(modeladmin: Any, obj: Any) -> str:
        return stamp(getattr(obj, field), getattr(obj, "db_now", None))

    return show


def lease_text(job: Job) -> str:
    """Say where the job's one clock stands: ``expires in 12 s``, ``runs in 30 s``, ..."""
    ahead = seconds_between(getattr(job, "db_now", None), job.visible_at)
    if ahead is None:
        return EMPTY
    when = {"duration": duration(ahead)}
    if job.status == JobStatus.RUNNING:
        if ahead > 0:
            return gettext("expires in %(duration)s") % when
        # The worker stopped heartbeating: the next claim re-delivers the job
        # (rule 1 (leased-claim)).
        return gettext("lapsed %(duration)s ago") % when
    if job.status == JobStatus.QUEUED:
        return gettext("runs in %(duration)s") % when if ahead > 0 else gettext("runnable")
    if job.status == JobStatus.WAITING:
        return (gettext("wakes in %(duration)s") % when if ahead > 0
                else gettext("woken, runnable"))
    return EMPTY


class JobListMixin:
    """Columns, search and the light changelist, shared by the jobs list and the in-flight list."""

    search_fields = ("name",)
    search_help_text = _("A job id (42 or #42), part of a registered job's name, or a whole name.")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        """Use a changelist that does not fetch payloads."""
        return LightChangeList

    def response_action(self, request: HttpRequest, queryset: QuerySet[Any],
                        *args: Any, **kwargs: Any) -> HttpResponse | None:
        """Refuse an action whose posted selection holds something that is not a job id."""
        # Django filters the primary key by the posted strings as they are, and a "²" (or an id
        # past a bigint, on SQLite) raises there: a server error instead of an answer.
        selected = request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME)
        bad = [value for value in selected if parse_job_id(value) is None]
        if bad:
            message = gettext("Nothing was done: %(value)s is not a job id.") % {
                "value": repr(bad[0])}
            self.message_user(request, message, messages.WARNING)  # type: ignore[attr-defined]
            return HttpResponseRedirect(request.get_full_path())
        return super().response_action(  # type: ignore[misc]
            request, queryset, *args, **kwargs)

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Job],
                           search_term: str) -> tuple[QuerySet[Job], bool]:
        """Search a job id (the primary key), else names containing the term, by index.

        A substring search of the table (``name ILIKE '%term%'``) reads every row, which at a
        million jobs takes seconds. The names are known, though: the
        registered jobs. So the term picks the registered names that contain it, and the rows
        are found by equality on the ``(name, status)`` index. A name no process registers
        (deploy skew) is found whole.
        """
        term = search_term.strip().removeprefix("#")
        if not term:
            return queryset, False
        job_id = parse_job_id(term)
        if job_id is not None:
            return queryset.filter(id=job_id), False
        folded = term.casefold()
        names = {name for name in registered_jobs() if folded in name.casefold()}
        return queryset.filter(name__in=sorted(names | {term})), False

    @admin.display(description=_("job"), ordering="id")
    def job_id(self, obj: Job) -> SafeString | str:
        """Link to the job's page (the in-flight rows link there too, not to a proxy page)."""
        return job_link(obj.pk)

    @admin.display(description=_("status"))
    def status_display(self, obj: Job) -> SafeString | str:
        """The status, whether a cancel is pending on a running job, and whether a cancelled
        job expired (rule 58 (expired-never-runs)): cancelled, but nobody asked for it."""
        if obj.cancel_requested and obj.status == JobStatus.RUNNING:
            return format_html('{} <span class="ultjobs-flag">{}</span>',
                               obj.status, gettext("cancel requested"))
        if is_expired(obj):
            return format_html('{} <span class="ultjobs-flag">{}</span>',
                               obj.status, gettext("expired"))
        return obj.status

    @admin.display(description=_("name"))
    def name_display(self, obj: Job) -> SafeString:
        """The job's name, wrapping at its separators only."""
        return breakable(obj.name)

    @admin.display(description=_("enqueued by"))
    def enqueued_by_display(self, obj: Job) -> SafeString | str:
        """Who enqueued the job (``user:<name>``, a process), wrapping at its separators only."""
        return breakable(obj.enqueued_by) if obj.enqueued_by else EMPTY

    @admin.display(description=_("attempt"))
    def attempt_of_max(self, obj: Job) -> str:
        """``attempt/max_attempts``."""
        return f"{obj.attempt}/{obj.max_attempts}"

    @admin.display(description=_("worker"))
    def worker(self, obj: Job) -> SafeString | str:
        """The worker that claimed the job last, linked to its page."""
        return worker_link(obj.worker_id)

    @admin.display(description=_("lease"))
    def lease(self, obj: Job) -> str:
        """``expires in 12 s`` for a running job; when a queued or waiting one may run."""
        return lease_text(obj)

    @admin.display(description=_("age"))
    def age(self, obj: Job) -> str:
        """Time since the job was enqueued."""
        elapsed = seconds_between(obj.created_at, getattr(obj, "db_now", None))
        return EMPTY if elapsed is None else duration(elapsed)

    @admin.display(description=_("cancel"))
    def cancel(self, obj: Job) -> SafeString | str:
        """Whether a cancel is pending (words: a red icon on every healthy row reads as alarm)."""
        if obj.cancel_requested:
            return format_html('<span class="ultjobs-flag">{}</span>', gettext("requested"))
        return EMPTY

    @admin.display(description=_("running for"))
    def running_for(self, obj: Job) -> str:
        """Time since this run was claimed."""
        elapsed = seconds_between(obj.claimed_at, getattr(obj, "db_now", None))
        return EMPTY if elapsed is None else duration(elapsed)

    @admin.display(description=_("progress"))
    def progress_display(self, obj: Job) -> SafeString | str:
        """The run's last ``ctx.set_progress`` (rule 79 (progress-throttled-fenced)): "37 / 100 —
        message" and a bar."""
        text = progress_text(obj.progress)
        if not text:
            return EMPTY
        done, total = obj.progress["done"], obj.progress["total"]
        return format_html('<progress class="ultjobs-progress" value="{}" max="{}"></progress> '
                           '<span class="ultjobs-progress-text">{}</span>',
                           min(done, total), max(total, 1), text)

    @admin.display(description=_("tags"))
    def tags_display(self, obj: Job) -> SafeString | str:
        """The job's tags (rule 78 (tags-stored-whole)), each a link to the jobs carrying it."""
        tags = obj.tags if isinstance(obj.tags, list) else []
        if not tags:
            return EMPTY
        url = reverse("admin:django_ultjobs_job_changelist")
        return format_html_join(" ", '<a class="ultjobs-tag" href="{}?{}">{}</a>',
                                ((url, urlencode({"tag": t}), t) for t in tags
                                 if isinstance(t, str)))


# -- actions --------------------------------------------------------------------------------------


def _log(request: HttpRequest, ids: tuple[int, ...], message: str) -> None:
    """Write one admin LogEntry per job changed, so each job's History shows who did what."""
    alias = jobs_database()
    for start in range(0, len(ids), LOG_CHUNK):
        rows = list(Job.objects.using(alias).filter(id__in=ids[start:start + LOG_CHUNK])
                    .only("id", "name", "status").order_by("id"))
        if rows:
            LogEntry.objects.log_actions(user_id=request.user.pk, queryset=rows,
                                         action_flag=CHANGE, change_message=message)


def _back_to_detail(request: HttpRequest) -> HttpResponse | None:
    """Return to the job's page when the action was a button there, else to the list."""
    selected = request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME)
    job_id = parse_job_id(selected[0]) if len(selected) == 1 else None
    if request.POST.get(FROM_DETAIL) and job_id is not None:
        # Built from the job id, never from a posted URL: no open redirect.
        return HttpResponseRedirect(reverse("admin:django_ultjobs_job_change", args=[job_id]))
    return None


#: Why a cancel leaves a job alone, by the status it was found in (worded for any count).
CANCEL_SKIPPED = {
    JobStatus.SUCCEEDED: _("already succeeded"),
    JobStatus.FAILED: _("already failed"),
    JobStatus.CANCELLED: _("already cancelled"),
    JobStatus.RUNNING: _("running and already asked to stop"),
}
#: Why a retry leaves a job alone, by the status it was found in.
RETRY_SKIPPED = {
    JobStatus.SUCCEEDED: _("succeeded"),
    JobStatus.QUEUED: _("still queued"),
    JobStatus.WAITING: _("waiting"),
    JobStatus.PENDING: _("waiting for its dependencies"),
    JobStatus.RUNNING: _("still running"),
}


def _skipped(request: HttpRequest, changed: tuple[int, ...],
             reasons: dict[str, str | Promise]) -> str:
    """Say which selected jobs an action left alone and why: ``1 already succeeded, 1 ...``.

    Counted only over the ids the user ticked (a page at most). "Select all" over a filtered
    million rows is not counted (that would read them all): the rest is named without a number.
    """
    if request.POST.get("select_across") == "1":
        return gettext("the other selected jobs") if changed else gettext("every selected job")
    selected = {job_id for value in request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME)
                if (job_id := parse_job_id(value)) is not None}
    left = selected - set(changed)
    if not left:
        return ""
    by_status = Counter(Job.objects.using(jobs_database()).filter(id__in=left)
                        .values_list("status", flat=True))
    parts = [f"{n} {reasons.get(status, status)}" for status, n in sorted(by_status.items())]
    gone = len(left) - sum(by_status.values())
    if gone:
        parts.append(gettext("%(count)d no longer in the database") % {"count": gone})
    return ngettext("%(count)d job (%(why)s)", "%(count)d jobs (%(why)s)", len(left)) % {
        "count": len(left), "why": ", ".join(parts)}


class CancelReasonForm(forms.Form):
    """The reason the cancel action asks for (rule 59 (cancel-reason-kept)): stored, logged, shown,
    read by the body."""

    reason = forms.CharField(
        label=_("Reason"), max_length=MAX_CANCEL_REASON,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=_("Why these jobs are cancelled: kept on each job, written into its history "
                    "and logs, and readable by a running job as ctx.cancel_reason."))


#: Posted by the cancel form: the action then cancels instead of asking for a reason.
CANCEL_CONFIRMED = "_ultjobs_cancel_confirmed"
#: The posted fields the cancel form carries over, so its answer selects the same jobs.
CARRIED = ("action", "index", "select_across", admin.helpers.ACTION_CHECKBOX_NAME, FROM_DETAIL)


@admin.action(permissions=["change"],
              description=_("Cancel selected jobs (queued now, running at their next heartbeat)"))
def cancel_selected(modeladmin: admin.ModelAdmin, request: HttpRequest,
                    queryset: QuerySet[Job]) -> HttpResponse | None:
    """Ask why, then cancel the selected queued/waiting jobs now and ask running ones to stop."""
    form = CancelReasonForm(request.POST if request.POST.get(CANCEL_CONFIRMED) else None)
    if not form.is_valid():
        return _ask_for_reason(modeladmin, request, form)
    reason = form.cleaned_data["reason"]
    result = cancel_jobs(queryset, using=jobs_database(), reason=reason, by=actor(request))
    _log(request, result.cancelled_ids,
         gettext("Cancelled from the admin before it ran (it was queued or waiting): "
                 "%(reason)s") % {"reason": reason})
    _log(request, result.requested_ids,
         gettext("Cancel requested from the admin while running: its worker cancels the run at "
                 "its next heartbeat: %(reason)s") % {"reason": reason})
    done = []
    if result.cancelled:
        done.append(ngettext("Cancelled %(count)d job that had not started.",
                             "Cancelled %(count)d jobs that had not started.",
                             result.cancelled) % {"count": result.cancelled})
    if result.requested:
        done.append(ngettext("Asked %(count)d running job to stop: each is cancelled at its "
                             "worker's next heartbeat.",
                             "Asked %(count)d running jobs to stop: each is cancelled at its "
                             "worker's next heartbeat.",
                             result.requested) % {"count": result.requested})
    skipped = _skipped(request, result.cancelled_ids + result.requested_ids,
                       CANCEL_SKIPPED)
    _report(modeladmin, request, done, skipped, gettext("Nothing was cancelled."),
            gettext("only queued, waiting or running jobs can be cancelled, a running one once"))
    return _back_to_detail(request)


def _ask_for_reason(modeladmin: admin.ModelAdmin, request: HttpRequest,
                    form: CancelReasonForm) -> TemplateResponse:
    """The page between the action and the cancel: the selected jobs, and a reason to give."""
    carried = [(key, value) for key in CARRIED for value in request.POST.getlist(key)]
    selected = request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME)
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": gettext("Why cancel these jobs?"),
        "opts": modeladmin.model._meta,
        "form": form,
        "carried": carried,
        "confirmed": CANCEL_CONFIRMED,
        "every_match": request.POST.get("select_across") == "1",
        "selected_count": len(selected),
        "selected_ids": selected[:20],
        "action_url": request.get_full_path(),
    }
    return TemplateResponse(request, "admin/django_ultjobs/cancel_reason.html", context)


@admin.action(permissions=["change"],
              description=_("Retry selected failed or cancelled jobs now"))
def retry_selected(modeladmin: admin.ModelAdmin, request: HttpRequest,
                   queryset: QuerySet[Job]) -> HttpResponse | None:
    """Queue the selected failed or cancelled jobs again, runnable now, one more attempt; not
    a job whose unique key another job holds now (rule 107 (retry-takes-key-back)): that one is
    named, with its holder."""
    return _retry(modeladmin, request, queryset, keyless=False)


@admin.action(permissions=["change"],
              description=_("Retry selected jobs now, even beside their unique key's holder"))
def retry_keyless(modeladmin: admin.ModelAdmin, request: HttpRequest,
                  queryset: QuerySet[Job]) -> HttpResponse | None:
    """Retry as the action above, but a job whose unique key another job holds runs anyway,
    without its key, beside that job: asked for by name, since two runs of one key may then run
    at once (rule 107 (retry-takes-key-back))."""
    return _retry(modeladmin, request, queryset, keyless=True)


def _retry(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Job], *,
           keyless: bool) -> HttpResponse | None:
    result = retry_jobs(queryset, using=jobs_database(), by=actor(request), keyless=keyless)
    _log(request, result.retried_ids,
         gettext("Retried from the admin: queued again, runnable now, one more attempt allowed."))
    _log(request, result.keyless_ids,
         gettext("Retried without its unique key, beside the job that holds it now."))
    done = [ngettext("Queued %(count)d job again.", "Queued %(count)d jobs again.",
                     result.retried) % {"count": result.retried}] if result.retried else []
    if result.keyless_ids:
        done.append(ngettext(
            "%(count)d of them runs without its unique key, beside the job that holds it.",
            "%(count)d of them run without their unique key, beside the jobs that hold them.",
            len(result.keyless_ids)) % {"count": len(result.keyless_ids)})
    refused = tuple(held.job_id for held in result.refused)
    skipped = _skipped(request, result.retried_ids + refused, RETRY_SKIPPED)
    if done or skipped or not refused:  # a refusal alone is said by the message below
        _report(modeladmin, request, done, skipped, gettext("Nothing was retried."),
                gettext("only failed or cancelled jobs can be retried"))
    _report_held(modeladmin, request, result.refused)
    return _back_to_detail(request)


def _report_held(modeladmin: admin.ModelAdmin, request: HttpRequest,
                 refused: tuple[KeyHeld, ...]) -> None:
    """Name each job left alone because another job holds its key, and that job
    (rule 107 (retry-takes-key-back))."""
    if not refused:
        return
    named = "; ".join(
        gettext("job %(job)s: key “%(key)s” is held by job %(holder)s") % {
            "job": held.job_id, "key": held.key, "holder": held.holder_id}
        for held in refused[:LISTED_HELD])
    more = len(refused) - LISTED_HELD
    if more > 0:
        named += "; " + gettext("and %(count)d more") % {"count": more}
    modeladmin.message_user(request, gettext(
        "Not retried: %(named)s. Two runs of one key would run at once; to retry anyway, "
        "without the key, use “Retry selected jobs now, even beside their unique key's "
        "holder”.") % {"named": named}, messages.ERROR)


def _report(modeladmin: admin.ModelAdmin, request: HttpRequest, done: list[str], skipped: str,
            nothing: str, rule: str) -> None:
    """Say what an action changed, then what it skipped and why (a warning, never silent)."""
    for message in done:
        modeladmin.message_user(request, message, messages.SUCCESS)
    if skipped:
        lead = "" if done else f"{nothing} "
        message = gettext("Skipped %(what)s: %(why)s.") % {"what": skipped, "why": rule}
        modeladmin.message_user(request, f"{lead}{message}", messages.WARNING)
    elif not done:
        modeladmin.message_user(request, f"{nothing} {capfirst(rule)}.", messages.WARNING)


# -- the detail page's history --------------------------------------------------------------------


class AttemptFormSet(BaseInlineFormSet):
    """A job's attempts, then, for a running job, the run in progress: its attempt is written
    only when the run settles, and a running job's table would otherwise be empty or end at the
    attempt before."""

    def get_queryset(self) -> Any:
        """The attempts, and the run in progress as an unsaved record (never written)."""
        rows = list(super().get_queryset())
        running = run_in_progress(self.instance)
        return [*rows, running] if running is not None else rows


def run_in_progress(job: Job | None) -> AttemptRecord | None:
    """The attempt a running job is making now, as a record for the attempts table (not saved:
    ``in_progress`` marks it), or None."""
    if job is None or job.pk is None or job.status != JobStatus.RUNNING or not job.attempt:
        return None
    record = AttemptRecord(job_id=job.pk, attempt=job.attempt, worker_id=job.worker_id,
                           started_at=job.claimed_at, outcome="running")
    record.in_progress = True  # type: ignore[attr-defined]
    record.db_now = getattr(job, "db_now", None)  # type: ignore[attr-defined]
    return record


class AttemptInline(ReadOnlyInline):
    """Every run of the job, with its outcome (succeeded, retrying, slot lost, ...): read through
    the attempts view, so the attempt a job's row holds is listed too (rule 97 (attempt-on-row))."""

    model = AttemptRecord
    formset = AttemptFormSet
    verbose_name = _("attempt")
    verbose_name_plural = _("attempts")
    fields = ("attempt", "outcome_display", "claims_count", "worker_id", "started", "finished",
              "took", "slot_held", "error_display")
    readonly_fields = fields
    ordering = ("id",)

    started = stamp_field("started_at", _("started"))
    finished = stamp_field("finished_at", _("finished"))

    @admin.display(description=_("outcome"))
    def outcome_display(self, obj: AttemptRecord) -> SafeString | str:
        """The attempt's outcome; ``running`` for the run in progress."""
        if getattr(obj, "in_progress", False):
            return format_html('<span class="ultjobs-running">{}</span>', gettext("running"))
        return obj.get_outcome_display() or EMPTY

    @admin.display(description=_("took"))
    def took(self, obj: AttemptRecord) -> str:
        """How long the run lasted (so far, for the run in progress)."""
        if getattr(obj, "in_progress", False):
            elapsed = seconds_between(obj.started_at, getattr(obj, "db_now", None))
            return EMPTY if elapsed is None else gettext("%(duration)s so far") % {
                "duration": run_time(elapsed)}
        elapsed = seconds_between(obj.started_at, obj.finished_at)
        return EMPTY if elapsed is None else run_time(elapsed)

    @admin.display(description=_("claims"))
    def claims_count(self, obj: AttemptRecord) -> str:
        """How many claims the row stands for: a park episode counts each
        (rule 12 (unknown-job-parked))."""
        return str(obj.claims) if obj.claims != 1 else EMPTY

    @admin.display(description=_("slot"))
    def slot_held(self, obj: AttemptRecord) -> str:
        """The fleet slot the run held, ``key[slot]``."""
        return f"{obj.slot_key}[{obj.slot}]" if obj.slot_key else EMPTY

    @admin.display(description=_("error"))
    def error_display(self, obj: AttemptRecord) -> SafeString | str:
        """The run's exception line, its traceback expandable (escaped and cut)."""
        return error_block(obj.error, MAX_SHOWN_INLINE)


class StepInline(ReadOnlyInline):
    """The job's durable steps: what a retry replays instead of running again."""

    model = JobStep
    verbose_name = _("step")
    verbose_name_plural = _("steps")
    fields = ("name", "status", "attempt", "created", "completed", "wakes", "result_display")
    readonly_fields = fields
    ordering = ("id",)

    # The attempts' format, to the second: Django's default drops the seconds, and the two
    # tables of one page read differently.
    created = stamp_field("created_at", _("created"))
    completed = stamp_field("completed_at", _("completed"))
    wakes = stamp_field("wait_until", _("wait until"))

    @admin.display(description=_("result"))
    def result_display(self, obj: JobStep) -> SafeString | str:
        """The step's stored result, escaped and cut."""
        return pretty_json(obj.result, MAX_SHOWN_INLINE)


# -- the pages ------------------------------------------------------------------------------------


@admin.register(Job)
class JobAdmin(DependencyFields, JobListMixin, JobsAdmin):
    """Every job: filter by status, queue, name and lease; cancel and retry."""

    list_display = ("job_id", "status_display", "name_display", "queue", "attempt_of_max",
                    "worker", "lease", "progress_display", "enqueued_by_display", "age")
    list_display_links = None
    list_filter = ("status", LeaseFilter, QueueFilter, JobNameFilter, TagFilter, BatchFilter,
                   WorkflowFilter)
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
        return _json_column(obj, "args")

    @admin.display(description=_("kwargs"))
    def kwargs_display(self, obj: Job) -> SafeString | str:
        """Keyword arguments, escaped and cut past 10,000 characters."""
        return _json_column(obj, "kwargs")

    @admin.display(description=_("result"))
    def result_display(self, obj: Job) -> SafeString | str:
        """The stored result (after success), escaped and cut."""
        return _json_column(obj, "result")

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


def running_text(job: Job) -> str:
    """What a running job's outcome is so far: its lease, said to be one (``expires in 28 s``
    alone read as a kill to come)."""
    ahead = seconds_between(getattr(job, "db_now", None), job.visible_at)
    if ahead is None:
        return gettext("running")
    when = {"duration": duration(ahead)}
    if ahead > 0:
        return gettext("running; its worker renews the lease at each heartbeat: expires in "
                       "%(duration)s unless renewed") % when
    # The worker stopped heartbeating: the next claim re-delivers the job (rule 1 (leased-claim)).
    return gettext("running, but its lease lapsed %(duration)s ago: the next claim re-delivers "
                   "it") % when


def earlier_attempt_note(job: Job) -> str:
    """Whose error ``last_error`` is when the job did not fail: an earlier attempt's."""
    if job.status == JobStatus.FAILED or not job.last_error:
        return ""
    if job.status == JobStatus.SUCCEEDED:
        return gettext("From an earlier attempt: attempt %(attempt)d succeeded.") % {
            "attempt": job.attempt}
    if job.status == JobStatus.RUNNING:
        return gettext("From an earlier attempt: attempt %(attempt)d is running.") % {
            "attempt": job.attempt}
    if job.status == JobStatus.QUEUED:
        return gettext("From attempt %(attempt)d: the job is queued to run again.") % {
            "attempt": job.attempt}
    return gettext("From an earlier attempt: the job is %(status)s now.") % {
        "status": job.status}


def is_expired(job: Job) -> bool:
    """Whether ``job`` ended by its expiry (rule 58 (expired-never-runs)): cancelled with no cancel
    requested, and an expiry set. Read from the row, so the list shows it without reading
    attempts."""
    return (job.status == JobStatus.CANCELLED and not job.cancel_requested
            and job.expires_at is not None)


def overrunning_on(job: Job) -> SafeString | str:
    """For a running job whose body ignores its timeout (rule 56 (overrun-reported)): which worker,
    which thread. Read from the rows of the live workers (one small query, on a job's page only)."""
    if job.status != JobStatus.RUNNING or job.timeout is None or not job.worker_id:
        return ""
    listed = (Worker.objects.using(jobs_database()).filter(id=job.worker_id, stopped_at=None)
              .values_list("overrunning", flat=True).first())
    for entry in listed if isinstance(listed, list) else ():
        if isinstance(entry, dict) and entry.get("job_id") == job.pk:
            return format_html(
                '<span class="ultjobs-flag">{}</span>',
                gettext("overrunning: still running past its %(timeout)s s timeout on thread "
                        "%(thread)s; its body ignores the cancellation") % {
                    "timeout": f"{job.timeout:g}", "thread": entry.get("thread", "?")})
    return ""


def _json_column(job: Job, field: str) -> SafeString | str:
    """A deferred JSON column of ``job``, loaded now: shown, or why it cannot be decoded."""
    try:
        value = getattr(job, field)
    # Exception: the reader raises RecursionError, ValueError (an integer past Python's digit
    # limit), or the driver a DatabaseError (SQLite text that is not UTF-8).
    except Exception as exc:
        return undecodable(f"{type(exc).__name__}: {exc}")
    return EMPTY if value is None else pretty_json(value)


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
        """Running rows whose lease is still ahead of the database's clock."""
        return super().get_queryset(request).filter(
            LeaseFilter.CONDITIONS["in_flight"])

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
