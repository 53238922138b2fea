"""The workers page: every ``runjobworker`` process seen recently, from the row its heartbeat
keeps."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..conf import get_settings
from ..models import Worker
from .base import JobsAdmin
from .display import EMPTY, ago, breakable, duration, job_link, seconds_between
from .filters import WorkerSeenFilter


@admin.register(Worker)
class WorkerAdmin(JobsAdmin):
    """Recently seen workers: id, host, pid, threads, queues, last heartbeat, runs in flight."""

    list_display = ("id_display", "hostname_display", "pid", "threads", "queue_list", "started",
                    "last_heartbeat", "runs_in_flight", "overrunning_runs", "state")
    list_filter = (WorkerSeenFilter,)
    ordering = ("-last_seen_at",)
    search_fields = ("id", "hostname")
    fields = ("state", "id", "hostname", "pid", "threads", "queue_list", "timings",
              "started_at", "started", "last_seen_at", "last_heartbeat", "runs_in_flight",
              "overrunning_runs", "stopped_at")
    readonly_fields = ("queue_list", "timings", "started", "last_heartbeat", "runs_in_flight",
                       "overrunning_runs", "state")

    @admin.display(description=_("id"), ordering="id")
    def id_display(self, obj: Worker) -> SafeString:
        """The worker's id (``host:pid:random``), wrapping at its colons only."""
        return breakable(obj.id)

    @admin.display(description=_("hostname"), ordering="hostname")
    def hostname_display(self, obj: Worker) -> SafeString:
        """The host, wrapping at its dots only (``ip-10-0-0-12.eu-west-1.compute.internal``)."""
        return breakable(obj.hostname)

    @admin.display(description=_("queues"))
    def queue_list(self, obj: Worker) -> SafeString | str:
        """The queues the worker claims from."""
        return breakable(", ".join(str(q) for q in obj.queues or ())) if obj.queues else EMPTY

    @admin.display(description=_("started"), ordering="started_at")
    def started(self, obj: Worker) -> str:
        """How long ago the process started."""
        return ago(obj.started_at, getattr(obj, "db_now", None))

    @admin.display(description=_("last heartbeat"), ordering="last_seen_at")
    def last_heartbeat(self, obj: Worker) -> str:
        """How long ago its heartbeat last touched the row (``3 s ago``)."""
        return ago(obj.last_seen_at, getattr(obj, "db_now", None))

    @admin.display(description=_("runs in flight"))
    def runs_in_flight(self, obj: Worker) -> SafeString | str:
        """Runs at its last heartbeat, linked to the in-flight view of this worker."""
        if obj.stopped_at is not None or not obj.in_flight:
            return str(obj.in_flight)
        url = reverse("admin:django_ultjobs_inflightjob_changelist")
        return format_html('<a href="{}?{}">{}</a>', url,
                           urlencode({"worker_id__exact": obj.id}), obj.in_flight)

    @admin.display(description=_("overrunning"))
    def overrunning_runs(self, obj: Worker) -> SafeString | str:
        """Runs still executing past their timeout, their bodies ignoring the cancellation
        (rule 56 (overrun-reported)): each job linked, with the thread running it."""
        return overrunning_text(obj.overrunning)

    @admin.display(description=_("lease timings"))
    def timings(self, obj: Worker) -> str:
        """The worker's own ``--visibility-timeout`` and ``--heartbeat-interval``."""
        if obj.visibility_timeout is None:
            unknown = gettext('not recorded (judged by ULTJOBS["VISIBILITY_TIMEOUT"], %(timeout)s)')
            return unknown % {"timeout": every(get_settings().VISIBILITY_TIMEOUT)}
        return gettext("visibility timeout %(timeout)s, heartbeat every %(interval)s") % {
            "timeout": every(obj.visibility_timeout),
            "interval": every(obj.heartbeat_interval or 0.0)}

    @admin.display(description=_("state"))
    def state(self, obj: Worker) -> SafeString | str:
        """``running``; ``late``; ``stopped``; or ``silent`` past its own visibility timeout."""
        return worker_state(obj, getattr(obj, "db_now", None))


def every(seconds: float) -> str:
    """Return a worker's flag value in seconds as it was given: ``0.2 s``, ``120 s``."""
    return gettext("%(seconds)s s") % {"seconds": f"{seconds:g}"}


def worker_state(worker: Worker, now: datetime | None) -> SafeString | str:
    """Judge a worker by its own timings: running, late, silent, or stopped.

    By the worker's own ``--visibility-timeout``, not this process's setting: a worker started
    with 120 s is healthy 50 s after a heartbeat, and one started with 10 s has lost its leases 26 s
    after its last one. Rows from before the timings were kept fall back to the setting.
    """
    if worker.stopped_at is not None:
        return gettext("stopped %(ago)s") % {"ago": ago(worker.stopped_at, now)}
    silent = seconds_between(worker.last_seen_at, now)
    if silent is None:
        return gettext("running")
    timeout = worker.visibility_timeout or get_settings().VISIBILITY_TIMEOUT
    # Silent for a whole visibility timeout, it has lost every lease it held: its jobs are
    # re-delivered and its slots lapse (rules 1 (leased-claim) and 5 (fleet-cap)). It is gone, or
    # cut off.
    if silent > timeout:
        return format_html('<span class="ultjobs-flag">{}</span>',
                           gettext("silent for %(duration)s") % {"duration": duration(silent)})
    # Two missed beats: a heartbeat failing and retried (rule 2 (heartbeat-retried)), or a stalled
    # process. Its leases still hold, for now.
    interval = worker.heartbeat_interval
    if interval and silent > 2 * interval:
        late = gettext("late: no heartbeat for %(duration)s (every %(interval)s)") % {
            "duration": duration(silent), "interval": every(interval)}
        return format_html('{} <span class="ultjobs-flag">{}</span>', gettext("running"), late)
    return gettext("running")


def overrunning_text(entries: object) -> SafeString | str:
    """``job 12 (send_report) on ultjobs-exec-3, past its 30 s timeout``, one per run."""
    if not isinstance(entries, list) or not entries:
        return EMPTY
    parts = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        parts.append(format_html(
            '<span class="ultjobs-flag">{}</span>',
            format_html(gettext("{} ({}) on {}, past its {} timeout"),
                        job_link(entry.get("job_id")), entry.get("job", "?"),
                        entry.get("thread", "?"), every(float(entry.get("timeout") or 0)))))
    return format_html_join(SafeString("<br>"), "{}", ((p,) for p in parts)) if parts else EMPTY
