"""The jobs lists' columns: what the jobs list and the in-flight list show of each job, how
they search, and the changelist that leaves the payloads in the database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.functional import Promise
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..jobs.registry import registered_jobs
from ..models import Job, JobStatus
from ..runtime.progress import progress_text
from .display import (
    EMPTY,
    breakable,
    duration,
    job_link,
    parse_job_id,
    seconds_between,
    stamp,
    worker_link,
)

#: Columns a list never shows and a page of 50 rows must not fetch: a job called with a 5 MB
#: document would otherwise cost 5 MB per row on every page view.
HEAVY_FIELDS = ("args", "kwargs", "result", "last_error", "wait_match", "depends_on",
                "dependents")


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


def is_expired(job: Job) -> bool:
    """Whether ``job`` ended by its expiry (rule 58 (expired-never-runs)): cancelled with no cancel
    requested, and an expiry set. Read from the row, so the list shows it without reading
    attempts."""
    return (job.status == JobStatus.CANCELLED and not job.cancel_requested
            and job.expires_at is not None)
