"""A job's page, apart from its layout (``JobAdmin`` in ``jobs.py``): its attempts and steps
tables, and the words it says of a running, overrunning or earlier-failed job."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.forms.models import BaseInlineFormSet
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..conf import jobs_database
from ..models import AttemptRecord, Job, JobStatus, JobStep, Worker
from .base import ReadOnlyInline
from .display import (
    EMPTY,
    MAX_SHOWN_INLINE,
    duration,
    error_block,
    pretty_json,
    run_time,
    seconds_between,
    undecodable,
)
from .job_list import stamp_field

#: The JSON columns a job's page reads one at a time, each surviving a value it cannot decode: a
#: row written by raw SQL or another producer (too deep, an integer too long, not UTF-8) must not
#: take the page that shows why it failed down with it (rule 15 (undecodable-row-fails-alone)).
JSON_FIELDS = ("args", "kwargs", "result", "wait_match")


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


def json_column(job: Job, field: str) -> SafeString | str:
    """A deferred JSON column of ``job``, loaded now: shown, or why it cannot be decoded."""
    try:
        value = getattr(job, field)
    # Exception: the reader raises RecursionError, ValueError (an integer past Python's digit
    # limit), or the driver a DatabaseError (SQLite text that is not UTF-8).
    except Exception as exc:
        return undecodable(f"{type(exc).__name__}: {exc}")
    return EMPTY if value is None else pretty_json(value)
