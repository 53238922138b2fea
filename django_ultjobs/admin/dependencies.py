"""What a job's page and the jobs list say about dependencies (docs/workflows.md): the jobs a
job waits for and the ones that wait for it, linked; what a pending job waits for; the batch
or workflow it belongs to; and the list's filters by batch and by workflow.

Every read is bounded whatever the graph holds: a node may wait for 10,000 others, and a
batch's callback for a million members, so a page links ``MAX_LINKED`` of them and says how
many more there are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..conf import jobs_database
from ..models import Job, JobStatus
from .display import EMPTY, admin_link, job_link, parse_job_id

#: Dependencies or dependents a job's page links, at most; the rest are counted.
MAX_LINKED = 20
#: What each ``when=`` waits for, in words.
CONDITION_TEXT = {
    "succeeded": _("runs when every one succeeded"),
    "failed": _("runs when every one finished and one at least did not succeed"),
    "finished": _("runs when every one finished, whatever its outcome"),
}


def ids_of(value: object) -> list[int]:
    """The job ids a ``depends_on``/``dependents`` column holds (nothing for anything else)."""
    if not isinstance(value, list):
        return []
    return [i for i in value if isinstance(i, int) and not isinstance(i, bool)]


def linked_jobs(ids: Sequence[int], more_url: str = "") -> SafeString | str:
    """The first ``MAX_LINKED`` of ``ids``, each a link with its status; then how many more."""
    if not ids:
        return EMPTY
    shown = list(ids[:MAX_LINKED])
    statuses = dict(Job.objects.using(jobs_database()).filter(id__in=shown)
                    .values_list("id", "status"))
    items = format_html_join(", ", "{} {}", (
        (job_link(i), statuses.get(i, gettext("(pruned)"))) for i in shown))
    rest = len(ids) - len(shown)
    if rest <= 0:
        return items
    more = ngettext("and %(count)s more", "and %(count)s more", rest) % {"count": f"{rest:,}"}
    if more_url:
        return format_html('{}, <a href="{}">{}</a>', items, more_url, more)
    return format_html("{}, {}", items, more)


def jobs_of(group: str, group_id: int) -> str:
    """The jobs list filtered to the members of batch (or nodes of workflow) ``group_id``."""
    return reverse("admin:django_ultjobs_job_changelist") + "?" + urlencode({group: group_id})


def waits_for_text(job: Job) -> str:
    """``2 of 3 dependencies finished; runs when every one succeeded`` for a pending job."""
    done = ngettext("%(done)s of %(total)s dependency finished",
                    "%(done)s of %(total)s dependencies finished", job.deps_total) % {
        "done": f"{job.deps_done:,}", "total": f"{job.deps_total:,}"}
    condition = CONDITION_TEXT.get(job.depends_when)
    return f"{done}; {condition}" if condition else done


class DependencyFields:
    """The job page's fields about dependencies, mixed into the job admin."""

    #: The fields this mixin adds, shown only on a job that has dependencies or dependents.
    dependency_fields = ("group_display", "waits_for", "dependencies_display",
                         "dependents_display")

    @staticmethod
    def has_graph(job: Job | None) -> bool:
        """Whether ``job`` is part of a batch or a workflow (its page then shows the fields)."""
        return job is not None and bool(job.batch_id or job.callback_of_id or job.workflow_id
                                        or job.has_dependents or job.deps_total)

    @admin.display(description=_("part of"))
    def group_display(self, obj: Job) -> SafeString | str:
        """The batch or workflow the job belongs to, linked to its page."""
        parts = []
        if obj.workflow_id:
            parts.append(admin_link("django_ultjobs_workflow_change", obj.workflow_id,
                                    gettext("workflow %(id)s") % {"id": obj.workflow_id}))
        if obj.batch_id:
            parts.append(admin_link("django_ultjobs_batch_change", obj.batch_id,
                                    gettext("batch %(id)s (a member)") % {"id": obj.batch_id}))
        if obj.callback_of_id:
            parts.append(admin_link(
                "django_ultjobs_batch_change", obj.callback_of_id,
                gettext("batch %(id)s (its callback, when %(when)s)") % {
                    "id": obj.callback_of_id, "when": obj.depends_when or EMPTY}))
        return format_html_join("; ", "{}", ((p,) for p in parts)) if parts else EMPTY

    @admin.display(description=_("waits for"))
    def waits_for(self, obj: Job) -> str:
        """What a pending job waits for; how its dependencies ended on any other."""
        if not obj.deps_total:
            return EMPTY
        if obj.status == JobStatus.PENDING:
            return waits_for_text(obj)
        failed = ngettext("%(count)s did not succeed", "%(count)s did not succeed",
                          obj.deps_failed) % {"count": f"{obj.deps_failed:,}"}
        return gettext("%(done)s of %(total)s dependencies finished, %(failed)s "
                       "(when %(when)s)") % {"done": f"{obj.deps_done:,}",
                                             "total": f"{obj.deps_total:,}", "failed": failed,
                                             "when": obj.depends_when or EMPTY}

    @admin.display(description=_("dependencies"))
    def dependencies_display(self, obj: Job) -> SafeString | str:
        """The jobs this one waits for, linked; a batch's callback waits for its members."""
        if obj.callback_of_id:
            url = jobs_of("batch", obj.callback_of_id)
            return format_html('<a href="{}">{}</a>', url, ngettext(
                "the %(count)s member of batch %(id)s", "the %(count)s members of batch %(id)s",
                obj.deps_total) % {"count": f"{obj.deps_total:,}", "id": obj.callback_of_id})
        more = jobs_of("workflow", obj.workflow_id) if obj.workflow_id else ""
        return linked_jobs(ids_of(obj.depends_on), more)

    @admin.display(description=_("dependents"))
    def dependents_display(self, obj: Job) -> SafeString | str:
        """The jobs that wait for this one, linked: its workflow's dependents, its batch's
        callbacks."""
        ids = ids_of(obj.dependents)
        if obj.batch_id and obj.has_dependents:
            ids += list(Job.objects.using(jobs_database()).filter(
                callback_of_id=obj.batch_id).order_by("id").values_list("id", flat=True)[:3])
        more = jobs_of("workflow", obj.workflow_id) if obj.workflow_id else ""
        return linked_jobs(ids, more)


def cancelled_by_text(job: Job) -> SafeString | str:
    """``cancelled: dependency 812 failed`` (linked) for a job its dependency's finish
    cancelled (rule 112 (impossible-condition-cancels)); "" for any other job."""
    if job.status != JobStatus.CANCELLED or not job.cancelled_by:
        return ""
    return format_html("{} ({})", gettext("cancelled: %(reason)s") % {
        "reason": job.cancel_reason or gettext("a dependency did not end as it needed")},
        job_link(job.cancelled_by))


class GroupFilter(admin.SimpleListFilter):
    """Keep the jobs of one batch or workflow: ``?batch=12``, ``?workflow=7``.

    No choices in the sidebar (listing every batch would read a table that only grows); a
    batch's or workflow's page and a job's page link here. The filter reads the partial
    index of the group's jobs, newest first."""

    field = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """Offer the group filtered on, so the sidebar shows what narrows the list."""
        value = self.value()
        return [(value, f"#{value}")] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the group's jobs; an id that is not a number is refused (Django's "?e=1")."""
        value = self.value()
        if not value:
            return queryset
        group_id = parse_job_id(value)
        if group_id is None:
            raise IncorrectLookupParameters(f"{self.parameter_name}={value!r} is not an id")
        return queryset.filter(**{self.field: group_id})


class BatchFilter(GroupFilter):
    """The members of a batch (its callbacks are on the batch's page)."""

    title = _("batch")
    parameter_name = "batch"
    field = "batch_id"


class WorkflowFilter(GroupFilter):
    """The nodes of a workflow."""

    title = _("workflow")
    parameter_name = "workflow"
    field = "workflow_id"
