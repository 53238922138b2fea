"""The Schedules page: every periodic job, when it ticks next, its last tick and how that ended.

Pausing and resuming act fleet-wide (every worker's tick statement reads the flag,
rule 63 (fleet-wide-pause)), need the change permission on schedules, and are written to each
schedule's History like the jobs' actions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import Exists, OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..conf import jobs_database
from ..core.schedules import Schedule, described
from ..jobs.periodic import periodic_jobs
from ..models import Job, JobSchedule
from ..operations import pause_schedules, resume_schedules
from .base import JobsAdmin
from .display import EMPTY, breakable, job_link, stamp


@admin.register(JobSchedule)
class JobScheduleAdmin(JobsAdmin):
    """Periodic jobs: schedule, time zone, next tick, last tick and its outcome, paused."""

    list_display = ("name_display", "schedule", "zone", "catch_up", "next_tick", "last_tick_at",
                    "last_outcome", "state")
    list_filter = ("paused",)
    ordering = ("name",)
    search_fields = ("name",)
    fields = ("name", "schedule", "zone", "catch_up", "state", "next_tick", "last_tick_at",
              "last_outcome", "created_at", "updated_at")
    readonly_fields = ("zone", "state", "next_tick", "last_tick_at", "last_outcome")
    actions = ("pause_selected", "resume_selected")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """Each schedule with its last tick's job (by the unique (name, tick) index)."""
        jobs = Job.objects.using(jobs_database())
        last = jobs.filter(name=OuterRef("name"), scheduled_for=OuterRef("last_tick"))
        return super().get_queryset(request).annotate(
            last_job_id=Subquery(last.values("id")[:1]),
            last_status=Subquery(last.values("status")[:1]),
            # The same index: has any tick of it been enqueued (and not yet pruned)?
            ever_ticked=Exists(jobs.filter(name=OuterRef("name"), scheduled_for__isnull=False)))

    @admin.display(description=_("name"), ordering="name")
    def name_display(self, obj: JobSchedule) -> SafeString:
        """The job's name, wrapping at its separators only."""
        return breakable(obj.name)

    @admin.display(description=_("time zone"))
    def zone(self, obj: JobSchedule) -> str:
        """The time zone a cron schedule is read in (UTC unless declared); none for every=."""
        if obj.schedule.startswith("every "):
            return EMPTY
        return obj.timezone or "UTC"

    @admin.display(description=_("next tick"))
    def next_tick(self, obj: JobSchedule) -> str:
        """When the schedule ticks next (database clock); nothing while it is paused."""
        if obj.paused:
            return EMPTY
        schedule = _schedule_of(obj)
        now = getattr(obj, "db_now", None)
        if schedule is None or now is None:
            return EMPTY
        after: datetime = max(now, obj.last_tick) if obj.last_tick else now
        return stamp(schedule.next_tick(after), now)

    @admin.display(description=_("last tick"), ordering="last_tick")
    def last_tick_at(self, obj: JobSchedule) -> str:
        """The newest tick enqueued (or when the schedule was resumed); ``never`` for one that
        never ticked, whose cursor is only when it began."""
        when = stamp(obj.last_tick, getattr(obj, "db_now", None))
        if getattr(obj, "ever_ticked", True):
            return when
        return gettext("never; scheduled since %(when)s") % {"when": when}

    @admin.display(description=_("outcome"))
    def last_outcome(self, obj: JobSchedule) -> SafeString | str:
        """The status of the last tick's job, linked to it."""
        job_id = getattr(obj, "last_job_id", None)
        if job_id is None:
            return EMPTY
        return job_link(job_id, f"#{job_id} {getattr(obj, 'last_status', '')}")

    @admin.display(description=_("state"))
    def state(self, obj: JobSchedule) -> str:
        """``paused`` or ``active``."""
        return gettext("paused") if obj.paused else gettext("active")

    @admin.action(permissions=["change"], description=_("Pause selected schedules (fleet-wide)"))
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[JobSchedule]) -> None:
        """Stop every worker from enqueueing the selected schedules' ticks."""
        names = pause_schedules(queryset, using=jobs_database())
        _log(request, names, gettext("Paused from the admin: no worker enqueues its ticks."))
        self._report(request, names, ngettext(
            "Paused %(count)d schedule.", "Paused %(count)d schedules.", len(names)),
            gettext("Nothing was paused: the selected schedules were already paused."))

    @admin.action(permissions=["change"],
                  description=_("Resume selected schedules from now (missed ticks skipped)"))
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[JobSchedule]) -> None:
        """Let the workers enqueue the selected schedules' ticks again, from now on."""
        names = resume_schedules(queryset, using=jobs_database())
        _log(request, names, gettext(
            "Resumed from the admin: ticks from now on; those of the pause are skipped."))
        self._report(request, names, ngettext(
            "Resumed %(count)d schedule.", "Resumed %(count)d schedules.", len(names)),
            gettext("Nothing was resumed: the selected schedules were not paused."))

    def _report(self, request: HttpRequest, names: tuple[str, ...], done: str,
                nothing: str) -> None:
        if names:
            self.message_user(request, done % {"count": len(names)}, messages.SUCCESS)
        else:
            self.message_user(request, nothing, messages.WARNING)


def _schedule_of(obj: JobSchedule) -> Schedule | None:
    """The schedule this process knows for the job, else the one its row describes."""
    spec = periodic_jobs().get(obj.name)
    if spec is not None and spec.schedule is not None:
        return spec.schedule
    return described(obj.schedule, obj.timezone, obj.catch_up)


def _log(request: HttpRequest, names: tuple[str, ...], message: str) -> None:
    """One admin LogEntry per schedule changed, so its History shows who paused it and when."""
    if names:
        rows = list(JobSchedule.objects.using(jobs_database()).filter(name__in=names)
                    .order_by("name"))
        LogEntry.objects.log_actions(user_id=request.user.pk, queryset=rows,
                                     action_flag=CHANGE, change_message=message)
