"""The jobs pages' actions: cancel (asking why) and retry, each saying what it changed, what
it left alone and why, and writing a LogEntry per job changed."""

from __future__ import annotations

from collections import Counter

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.functional import Promise
from django.utils.text import capfirst
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..conf import jobs_database
from ..jobs.unique import KeyHeld
from ..models import Job, JobStatus
from ..operations import MAX_CANCEL_REASON, cancel_jobs, retry_jobs
from .base import actor
from .display import parse_job_id

#: Ids per LogEntry batch when an action touched many jobs.
LOG_CHUNK = 500
#: Jobs a retry's message names whose key another job holds, at most.
LISTED_HELD = 10
#: Posted by the buttons on a job's page: the action then returns to that page.
FROM_DETAIL = "_ultjobs_from_detail"


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
