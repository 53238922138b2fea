"""The batches' and workflows' pages (docs/workflows.md): a batch's members by status, its
progress and its callbacks; a workflow's jobs by status and its graph; an action cancelling
either (rule 115 (group-cancel)).

The lists read the groups' own small rows and nothing of their jobs: a progress per row would
count the members of fifty batches per page view. A group's page reads its jobs, bounded
(``group_figures``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..conf import jobs_database
from ..models import Batch, Job, Workflow
from ..operations import cancel_jobs
from . import group_figures
from .base import JobsAdmin, actor
from .dependencies import jobs_of, waits_for_text
from .display import EMPTY, job_link
from .graph_svg import graph_svg
from .group_figures import (
    StatusCounts,
    callbacks,
    open_members,
    status_counts,
    workflow_graph,
)
from .job_list import stamp_field

#: Callbacks by their condition, as ``Batch(...)`` names them.
CALLBACK_NAMES = {"succeeded": "on_success", "failed": "on_failure", "finished": "on_finish"}


def counts_table(counts: StatusCounts, group: str, group_id: int) -> SafeString | str:
    """The group's jobs by status, each count linked to the jobs list so filtered."""
    if not counts.counted:
        return gettext("no job")
    rows = format_html_join("", '<tr><th scope="row">{}</th><td class="num"><a href="{}">{}</a>'
                                "</td></tr>",
                            ((status, f"{jobs_of(group, group_id)}&status={status}", f"{n:,}")
                             for status, n in counts.counts.items()))
    note = ""
    if counts.capped:
        note = format_html('<p class="ultjobs-flag">{}</p>', gettext(
            "Counted over its first %(cap)s jobs only: counting them all would cost the page "
            "too much.") % {"cap": f"{group_figures.MAX_COUNTED:,}"})
    return format_html('<table class="ultjobs-numbers"><tbody>{}</tbody></table>{}', rows, note)


def cancel_groups(modeladmin: JobsAdmin, request: HttpRequest,
                  queryset: QuerySet[Any]) -> None:
    """Cancel each selected group's unfinished jobs that wait for nobody; what waits for them
    is then released or cancelled as its ``when`` says (rule 115 (group-cancel))."""
    cancelled = requested = 0
    for group in queryset.using(jobs_database())[:100]:
        result = cancel_jobs(group, by=actor(request),
                             reason=gettext("%(group)s cancelled from the admin") % {
                                 "group": str(group)})
        cancelled += result.cancelled
        requested += result.requested
    modeladmin.message_user(request, gettext(
        "Cancelled %(cancelled)s job(s) now; asked %(requested)s running job(s) to stop at "
        "their next heartbeat.") % {"cancelled": f"{cancelled:,}", "requested": f"{requested:,}"},
        messages.SUCCESS)


@admin.action(permissions=["change"], description=_(
    "Cancel selected batches (their unfinished members; callbacks run as they say)"))
def cancel_batches(modeladmin: JobsAdmin, request: HttpRequest, queryset: QuerySet[Any]) -> None:
    """Cancel the selected batches (``cancel_groups``)."""
    cancel_groups(modeladmin, request, queryset)


@admin.action(permissions=["change"], description=_(
    "Cancel selected workflows (their unfinished jobs; dependents run as they say)"))
def cancel_workflows(modeladmin: JobsAdmin, request: HttpRequest,
                     queryset: QuerySet[Any]) -> None:
    """Cancel the selected workflows (``cancel_groups``)."""
    cancel_groups(modeladmin, request, queryset)


class GroupAdmin(JobsAdmin):
    """What the batches' and workflows' pages share: read-only, governed by the jobs'
    permissions, newest first by primary key."""

    permission_model = Job
    ordering = ("-id",)
    sortable_by = ("id",)
    list_display_links = ("id",)
    created = stamp_field("created_at", _("created"))



@admin.register(Batch)
class BatchAdmin(GroupAdmin):
    """Batches: their members by status, their progress, their callbacks."""

    list_display = ("id", "description", "total", "created")
    search_fields = ("=id",)
    actions = (cancel_batches,)
    readonly_fields = ("description", "total", "created", "progress", "members_by_status",
                       "callbacks_display")
    fields = readonly_fields

    @admin.display(description=_("progress"))
    def progress(self, obj: Batch) -> SafeString | str:
        """``87,000 of 100,000 members finished`` and a bar (the open members' index)."""
        unfinished = open_members(obj.pk, jobs_database())
        if unfinished > group_figures.MAX_COUNTED:
            text = gettext("more than %(count)s of %(total)s members still to finish") % {
                "count": f"{group_figures.MAX_COUNTED:,}", "total": f"{obj.total:,}"}
            return text
        done = max(obj.total - unfinished, 0)
        text = ngettext("%(done)s of %(total)s member finished",
                        "%(done)s of %(total)s members finished", obj.total) % {
            "done": f"{done:,}", "total": f"{obj.total:,}"}
        return format_html('<progress class="ultjobs-progress" value="{}" max="{}"></progress> '
                           '<span class="ultjobs-progress-text">{}</span>', done,
                           max(obj.total, 1), text)

    @admin.display(description=_("members by status"))
    def members_by_status(self, obj: Batch) -> SafeString | str:
        """The members' statuses, each linked to the jobs list."""
        return counts_table(status_counts("batch_id", obj.pk, jobs_database()), "batch", obj.pk)

    @admin.display(description=_("callbacks"))
    def callbacks_display(self, obj: Batch) -> SafeString | str:
        """Each callback's job, its condition, and what became of it."""
        jobs = callbacks(obj.pk, jobs_database())
        if not jobs:
            return gettext("none")
        return format_html_join("", '<p>{}: {} {} ({})</p>', (
            (CALLBACK_NAMES.get(job.depends_when, job.depends_when or EMPTY), job_link(job.pk),
             job.name, callback_state(job)) for job in jobs))


def callback_state(job: Job) -> str:
    """What a callback is doing: waiting (and for what), or its status and why."""
    if job.status == "pending":
        return waits_for_text(job)
    if job.status == "cancelled" and job.cancel_reason:
        return gettext("cancelled: %(reason)s") % {"reason": job.cancel_reason}
    return str(job.status)


@admin.register(Workflow)
class WorkflowAdmin(GroupAdmin):
    """Workflows: their jobs by status and their graph."""

    list_display = ("id", "name", "created")
    search_fields = ("=id",)
    actions = (cancel_workflows,)
    readonly_fields = ("name", "created", "jobs_by_status", "graph")
    fields = readonly_fields

    @admin.display(description=_("jobs by status"))
    def jobs_by_status(self, obj: Workflow) -> SafeString | str:
        """The nodes' statuses, each linked to the jobs list."""
        return counts_table(status_counts("workflow_id", obj.pk, jobs_database()), "workflow",
                            obj.pk)

    @admin.display(description=_("graph"))
    def graph(self, obj: Workflow) -> SafeString | str:
        """The first ``MAX_DRAWN`` nodes drawn, and a note when there are more."""
        drawn = workflow_graph(obj.pk, jobs_database())
        if not drawn.nodes:
            return EMPTY
        note = ""
        if drawn.more:
            words = gettext(
                "Only its first %(cap)s jobs are drawn: a drawing of thousands of boxes is no "
                "longer read, and would cost the page too much.") % {
                "cap": group_figures.MAX_DRAWN}
            note = format_html('<p class="ultjobs-flag">{} <a href="{}">{}</a></p>', words,
                               jobs_of("workflow", obj.pk), gettext("Every job of the workflow"))
        return format_html('<div class="ultjobs-graph">{}</div>{}', graph_svg(drawn), note)
