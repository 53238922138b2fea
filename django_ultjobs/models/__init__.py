"""The job tables: jobs, their attempts, steps and events; the tables the fleet shares beside them
(slots, rate limits, paused queues, schedules, workers) are in ``fleet.py``.

The worker never reads or writes these through the ORM on its hot path (``store/`` owns that SQL);
the models are for migrations, the admin, listings and user code. Beside them, ``attempt_view``
holds the SQL of the attempts view and ``migration_operations`` the operations the migrations
run; migrations import both, so what an old migration builds never changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from ..core.slot_keys import MAX_SLOT_KEY
from . import attempt_view
from .fleet import HeldSlot as HeldSlot
from .fleet import JobSchedule as JobSchedule
from .fleet import QueuePause as QueuePause
from .fleet import RateLimitBucket as RateLimitBucket
from .fleet import Slot as Slot
from .fleet import Worker as Worker
from .workflows import Batch as Batch
from .workflows import Workflow as Workflow


class JobStatus(models.TextChoices):
    QUEUED = "queued", _("queued")
    RUNNING = "running", _("running")
    WAITING = "waiting", _("waiting")
    #: Waits for its dependencies (a workflow node, a batch's callback): never claimed, holds
    #: no slot, and becomes queued or cancelled in the settle of its last dependency
    #: (rule 110 (released-in-settle)).
    PENDING = "pending", _("pending")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    CANCELLED = "cancelled", _("cancelled")


#: Statuses a worker may still claim (a running row whose lease lapsed is re-delivered).
LIVE_STATUSES = (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.WAITING)
#: Statuses of a job not finished for good: it may still run (a pending one, once released).
UNFINISHED_STATUSES = (*LIVE_STATUSES, JobStatus.PENDING)
#: Statuses a job never leaves on its own.
FINISHED_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class AttemptOutcome(models.TextChoices):
    SUCCEEDED = "succeeded", _("succeeded")
    RETRYING = "retrying", _("retrying")
    FAILED = "failed", _("failed")
    CANCELLED = "cancelled", _("cancelled")
    SLOT_LOST = "slot_lost", _("slot lost")
    LEASE_LOST = "lease_lost", _("lease lost")
    SUSPENDED = "suspended", _("suspended")
    # A drain hands the job back without burning an attempt;
    # calling that "cancelled" would tell an operator somebody cancelled it.
    INTERRUPTED = "interrupted", _("interrupted")
    #: Still running after its timeout (rule 55 (timeout-cancels)); the retry policy decided what
    #: followed.
    TIMED_OUT = "timed_out", _("timed out")
    #: The body raised NonRetryable: failed at once (rule 57 (retry-on-only)).
    NON_RETRYABLE = "non_retryable", _("non-retryable")
    #: The body raised an exception outside the job's retry_on: failed at once
    #: (rule 57 (retry-on-only)).
    NOT_RETRIED = "not_retried", _("not retried")
    #: Claimed after its expiry before it ever started: cancelled, never run
    #: (rule 58 (expired-never-runs)).
    EXPIRED = "expired", _("expired")


#: How ``Job.wait`` and ``Job.wait_async`` wait: set by ``jobs.waiting`` (a layer above the
#: models, which the app loads when it is ready).
waiters: dict[str, Callable[..., Any]] = {}


class Job(models.Model):
    """One enqueued call of a registered job, from enqueue to its final status."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200)
    queue = models.CharField(max_length=100, default="default")
    priority = models.IntegerField(default=0, help_text=_("Higher runs first."))
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED)
    attempt = models.PositiveIntegerField(
        default=0, help_text=_("Runs started so far; 1 while the first run is in flight.")
    )
    max_attempts = models.PositiveIntegerField(default=3)
    # The one clock of a job: when a queued job may run, when a running job's lease lapses, when a
    # waiting job wakes. Always written from the database's clock.
    visible_at = models.DateTimeField(db_default=Now())
    claim_token = models.UUIDField(null=True, blank=True, editable=False)
    worker_id = models.CharField(max_length=200, blank=True, default="")
    claimed_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    #: Why it was cancelled, as given to cancel_jobs(reason=...) or the admin's form
    #: (rule 59 (cancel-reason-kept)).
    cancel_reason = models.TextField(blank=True, default="", db_default="")
    #: Seconds a run may execute before it is cancelled as timed out (rule 55 (timeout-cancels));
    #: None: no limit. Kept on the row, so a .using(timeout=...) of one enqueue reaches the worker.
    timeout = models.FloatField(null=True, blank=True)
    #: A job not started by then is never run (rule 58 (expired-never-runs)); on the database's
    #: clock.
    expires_at = models.DateTimeField(null=True, blank=True)
    # What a waiting job waits for (ctx.wait_for_event): send_event wakes it by these. An event
    # with id <= wait_after was already consumed by an earlier wait of the same run.
    wait_event = models.CharField(max_length=200, blank=True, default="")
    wait_match = models.JSONField(null=True, blank=True)
    wait_after = models.BigIntegerField(default=0)
    traceparent = models.CharField(max_length=512, blank=True, default="")
    tracestate = models.CharField(max_length=512, blank=True, default="")
    enqueued_by = models.CharField(max_length=200, blank=True, default="")
    # The key of the fleet slots a run of this job takes when its cap is per key
    # (@job(concurrency_key=...), rule 50 (per-key-cap)), computed at enqueue; "" for the job's own.
    concurrency_key = models.CharField(max_length=MAX_SLOT_KEY, blank=True, default="",
                                       db_default="")
    last_error = models.TextField(blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)
    #: The tick a periodic job's scheduler enqueued this row for (rule 61 (tick-on-time)); None for
    #: a job enqueued by code. Unique per job name, so a tick is never enqueued twice
    #: (rule 60 (tick-once)).
    scheduled_for = models.DateTimeField(null=True, blank=True)
    #: The key this job holds (rules 65 (one-key-holder) to 67 (unique-for-window)): set at enqueue
    #: for ``@job(unique=True)`` or ``.using(unique_key=...)``, kept after the job finished, and
    #: cleared (NULL) only when a later enqueue of the same key takes it over, once this job has
    #: been finished for ``unique_for`` seconds. NULL for a job that holds no key.
    unique_key = models.CharField(_("unique key"), max_length=200, null=True, blank=True,
                                  editable=False)
    #: Seconds after it finished that this job still holds its key (``@job(unique_for=...)``).
    unique_for = models.FloatField(default=0.0, db_default=0.0, editable=False)
    #: The key this job held until a later enqueue of it took the key over
    #: (rule 66 (held-key-returns-holder)): a retry of this job takes the key back, or is refused
    #: naming the job that holds it (rule 107 (retry-takes-key-back)). NULL while the job holds its
    #: key, and for a job that never held one.
    released_key = models.CharField(_("released unique key"), max_length=200, null=True,
                                    blank=True, editable=False)
    #: Short labels given at enqueue (``.using(tags=[...])``, ``@job(tags=[...])``;
    #: rule 78 (tags-stored-whole)), searched by the admin and ``ultjobs list --tag``: a JSON list
    #: of strings.
    tags = models.JSONField(_("tags"), default=list, db_default=[], blank=True, editable=False)
    #: The run's last ``ctx.set_progress(done, total, message)``
    #: (rule 79 (progress-throttled-fenced)): ``{"done": ..., "total": ..., "message": ...}``, or
    #: None before any. Written fenced on the claim token.
    progress = models.JSONField(_("progress"), null=True, blank=True, editable=False)
    #: This row holds the job's attempt: a first attempt that succeeded with nothing the row
    #: cannot say (no steps, no error, no fleet slot but a per-job one) is written here by its
    #: settle instead of as an attempt row of its own (rule 97 (attempt-on-row)). Read through
    #: ``AttemptRecord``, never alone.
    attempt_on_row = models.BooleanField(default=False, db_default=False, editable=False)
    #: The per-job fleet slot (``slot_keys.slot_key_for`` of this job's name) the attempt this
    #: row holds ran in; None when it held no slot, or the row holds no attempt
    #: (rule 97 (attempt-on-row)).
    attempt_slot = models.IntegerField(null=True, editable=False)
    # -- dependencies (docs/workflows.md; rules 110 (released-in-settle)
    # to 118 (bad-graph-refused)). Plain jobs keep every one at its
    # default, and the settle of a job whose has_dependents is false reads none of them.
    #: The batch this job is a member of (``Batch``), or None.
    batch = models.ForeignKey("Batch", null=True, blank=True, editable=False,
                              on_delete=models.DO_NOTHING, db_constraint=False, db_index=False,
                              related_name="members")
    #: The batch this job is a callback of (on_success, on_failure or on_finish), or None.
    callback_of = models.ForeignKey("Batch", null=True, blank=True, editable=False,
                                    on_delete=models.DO_NOTHING, db_constraint=False,
                                    db_index=False, related_name="callbacks")
    #: The workflow this job is a node of, or None.
    workflow = models.ForeignKey("Workflow", null=True, blank=True, editable=False,
                                 on_delete=models.DO_NOTHING, db_constraint=False,
                                 db_index=False, related_name="nodes")
    #: The ids of the jobs this one waits for, in the order given to ``after=``; None for a
    #: job with no dependencies in a workflow (a batch's callback counts its batch's members).
    depends_on = models.JSONField(null=True, blank=True, editable=False)
    #: The ids of the workflow nodes that wait for this job; None for none.
    dependents = models.JSONField(null=True, blank=True, editable=False)
    #: Some job counts this one's finish (a node in ``dependents``, a callback of its batch):
    #: its settle then releases them (rule 110 (released-in-settle)).
    has_dependents = models.BooleanField(default=False, db_default=False, editable=False)
    #: How many dependencies this job waits for, how many finished for good, and how many of
    #: those did not succeed; exact whatever this job's own status
    #: (rule 113 (constant-bookkeeping)).
    deps_total = models.IntegerField(default=0, db_default=0, editable=False)
    deps_done = models.IntegerField(default=0, db_default=0, editable=False)
    deps_failed = models.IntegerField(default=0, db_default=0, editable=False)
    #: When it runs: "succeeded", "failed" or "finished" (``Workflow.add(when=...)``); "" for a
    #: job with no dependencies.
    depends_when = models.CharField(max_length=16, blank=True, default="", db_default="",
                                    editable=False)
    #: The dependency whose finish cancelled this job (rule 112 (impossible-condition-cancels));
    #: None for any other cancel. A retry of that dependency brings this job back to pending
    #: (rule 114 (retry-takes-finish-back)).
    cancelled_by = models.BigIntegerField(null=True, blank=True, editable=False)
    #: What this job's finish notifies, when someone may wait for it (rule 116 (wait-for-result)):
    #: its batch's key ("b12"), its workflow's ("w7"), or its own ("j812", set by ``job.wait()``);
    #: None for a job nobody waits for, whose settle then notifies nothing.
    wait_key = models.CharField(max_length=40, null=True, blank=True, editable=False)

    class Meta:
        constraints = [
            # One row per (job, tick) across the fleet: a second worker's insert of the same
            # tick is skipped (rule 60 (tick-once)). Partial: jobs enqueued by code have no tick.
            models.UniqueConstraint(
                fields=["name", "scheduled_for"], name="ultjobs_job_tick",
                condition=models.Q(scheduled_for__isnull=False),
            ),
            # One holder per key, whatever number of processes enqueue it at once
            # (rule 65 (one-key-holder)). Partial: the rows without a key, nearly all of them, cost
            # the index nothing.
            models.UniqueConstraint(
                fields=["name", "unique_key"], name="ultjobs_job_unique_key",
                condition=models.Q(unique_key__isnull=False),
            ),
        ]
        indexes = [
            # The claim: runnable rows of a queue in priority order. Partial, so millions of
            # finished rows cost the claim nothing.
            models.Index(
                "queue",
                models.F("priority").desc(),
                "visible_at",
                "id",
                name="ultjobs_job_claim",
                condition=models.Q(status__in=["queued", "running", "waiting"]),
            ),
            # The claim of a capped kind (concurrency=N): its runnable rows in priority order,
            # so the claim takes the first free-slots of them instead of sorting every queued
            # run of the kind.
            models.Index(
                "name",
                models.F("priority").desc(),
                "visible_at",
                "id",
                name="ultjobs_job_claim_kind",
                condition=models.Q(status__in=["queued", "running", "waiting"]),
            ),
            # The live rows by queue, status and due time: every count of the stats view and the
            # admin's summary is one range of it, stopped at a cap, and a queue's longest-due
            # job is its first entry (rule 120 (bounded-live-stats)). The name rides along as a
            # last key column (SQLite has no INCLUDE), so telling held-back kinds apart reads no
            # table row. Its predicate adds name > '' (true of every job), which the stats
            # state and no claim does: a planner without statistics, which costs this index's
            # (queue, status, due) range below the claim index's, could otherwise take it for a
            # claim and sort every runnable job of the queue on each claim.
            models.Index(
                "queue",
                "status",
                "visible_at",
                "name",
                name="ultjobs_job_live",
                condition=models.Q(status__in=["queued", "running", "waiting"], name__gt=""),
            ),
            # The pending and the failed jobs by queue: the stats count each as a range, capped.
            models.Index("queue", name="ultjobs_job_pending", condition=models.Q(status="pending")),
            models.Index("queue", "finished_at", name="ultjobs_job_failed",
                         condition=models.Q(status="failed")),
            # The jobs list filtered by failed or cancelled, newest first: one range of this
            # index in id order, where the primary key walked backwards past every newer job of
            # another status (a million queued jobs ahead of the failed ones). Only the rows
            # of these two rare outcomes: no enqueue, claim, heartbeat or successful settle
            # writes an entry here.
            models.Index("status", "id", name="ultjobs_job_status",
                         condition=models.Q(status__in=["failed", "cancelled"])),
            models.Index("finished_at", name="ultjobs_job_finished",
                         condition=models.Q(status__in=["succeeded", "failed", "cancelled"])),
            # The attempts the rows hold (rule 97 (attempt-on-row)), newest first: the charts read
            # them through the attempts view, a bounded number from the newest
            # (rule 80 (bounded-charts)). Without it the view's half over the jobs was a scan and
            # sort of every one in the window; it costs a plain success one index entry, where
            # its attempt row cost a heap row and three.
            models.Index("finished_at", name="ultjobs_job_attempt_on_row",
                         condition=models.Q(attempt_on_row=True)),
            models.Index("name", "status", name="ultjobs_job_name_status"),
            models.Index(
                "wait_event",
                name="ultjobs_job_waiting",
                condition=models.Q(status="waiting"),
            ),
            # Partial, so plain jobs cost these nothing: a batch's unfinished members (what
            # batch.wait() and the admin look for), its callbacks, a workflow's nodes.
            models.Index("batch", name="ultjobs_job_batch_open",
                         condition=models.Q(batch__isnull=False,
                                            status__in=["queued", "running", "waiting",
                                                        "pending"])),
            models.Index("batch", "id", name="ultjobs_job_batch",
                         condition=models.Q(batch__isnull=False)),
            models.Index("callback_of", name="ultjobs_job_callback_of",
                         condition=models.Q(callback_of__isnull=False)),
            models.Index("workflow", "id", name="ultjobs_job_workflow",
                         condition=models.Q(workflow__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.name}#{self.pk} ({self.status})"

    def wait(self, timeout: float | None = None) -> Job:
        """Block until this job finished for good and return its row read afresh; raise
        ``TimeoutError`` past ``timeout`` seconds (rule 116 (wait-for-result);
        docs/workflows.md)."""
        return waiters["wait"](self, timeout)

    async def wait_async(self, timeout: float | None = None) -> Job:
        """``wait`` for async code."""
        return await waiters["wait_async"](self, timeout)


class JobAttempt(models.Model):
    """One run of a job (or one re-delivery of a run that never reported back)."""

    id = models.BigAutoField(primary_key=True)
    # No index of its own: ultjobs_attempt_job (job, attempt) below serves every lookup by job,
    # and a second one cost every settle one more index write per attempt row.
    # job.attempts reads every attempt (AttemptRecord, rule 97 (attempt-on-row)); these rows are
    # job.attempt_rows. No constraint in the database, as for steps: see JobStep.job.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempt_rows",
                            db_index=False, db_constraint=False)
    attempt = models.PositiveIntegerField()
    worker_id = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(db_default=Now())
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    error = models.TextField(blank=True, default="")
    slot_key = models.CharField(max_length=200, blank=True, default="")
    slot = models.IntegerField(null=True, blank=True)
    #: Durable steps this run executed, and the ones it replayed from an earlier run.
    steps_run = models.JSONField(default=list, blank=True)
    steps_replayed = models.JSONField(default=list, blank=True)
    #: Claims this row stands for: a job no worker knows is parked once per claim, and every
    #: park of one episode adds here instead of writing another row (rule 12 (unknown-job-parked)).
    #: A plain integer: a CHECK (>= 0) would make adding the column scan the whole attempts table
    #: under an exclusive lock on PostgreSQL, where a constant default alone changes only the
    #: catalog.
    claims = models.IntegerField(default=1, db_default=1)

    class Meta:
        indexes = [
            models.Index("job", "attempt", name="ultjobs_attempt_job"),
            # Only the lost-slot pages read attempts by outcome, and only slot_lost ones: a
            # partial index stays tiny and costs the settle of every other run nothing (an
            # index on every attempt's outcome was one more index write per job).
            models.Index("finished_at", "id", name="ultjobs_attempt_slot_lost",
                         condition=models.Q(outcome="slot_lost")),
            # The admin's charts read the attempts of the last hour or day, newest first, and at
            # most a bounded number of them (rule 80 (bounded-charts)). Finish times only grow, so
            # each settle adds at the index's right edge, the cheapest place to add to a b-tree.
            models.Index("finished_at", name="ultjobs_attempt_finished"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt}: {self.outcome}"


#: Where the ids of the attempts the jobs' rows hold begin (rule 97 (attempt-on-row)): the view's
#: own constant.
ON_ROW_ID = attempt_view.ON_ROW_ID


class AttemptRecord(models.Model):
    """One attempt as every reader sees it (rule 97 (attempt-on-row)): an attempt row, or the
    attempt a job's own row holds (``Job.attempt_on_row``: worker, attempt number, claim time as its
    start, finish time, outcome succeeded, its per-job slot from ``Job.attempt_slot``), with ``id``
    ``ON_ROW_ID`` + the job's id: above every attempt row's id, so in id order it comes after
    the job's rows, as it happened.

    A view over both tables (migrations 0022 and 0023), read-only: the admin, the Django Tasks
    results, ``ultjobs show``, the charts and the prune's counts read attempts here, so none can
    forget the attempts that have no row of their own. Read them in order with
    ``attempts.history``.
    """

    id = models.BigIntegerField(primary_key=True)
    job = models.ForeignKey(Job, on_delete=models.DO_NOTHING, related_name="attempts",
                            db_constraint=False)
    attempt = models.PositiveIntegerField()
    worker_id = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    error = models.TextField(blank=True, default="")
    slot_key = models.CharField(max_length=200, blank=True, default="")
    slot = models.IntegerField(null=True, blank=True)
    steps_run = models.JSONField(default=list, blank=True)
    steps_replayed = models.JSONField(default=list, blank=True)
    claims = models.IntegerField(default=1)

    class Meta:
        managed = False
        db_table = "django_ultjobs_attemptrecord"
        default_permissions = ()
        verbose_name = _("attempt")
        verbose_name_plural = _("attempts")

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt}: {self.outcome}"


class JobStep(models.Model):
    """A durable step of a job: its result is kept, so a later run replays instead of re-running.

    ``status`` is ``done`` once the result is stored, or ``waiting`` while a durable sleep or an
    event wait is pending (``wait_until`` is then when it wakes or times out).
    """

    id = models.BigAutoField(primary_key=True)
    # No constraint in the database (migration 0031): PostgreSQL's check, a query per job deleted,
    # tripled the prune's time. Each row is written from its job's row and leaves with it.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="steps",
                            db_constraint=False)
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=16, default="done")
    result = models.JSONField(null=True, blank=True)
    wait_until = models.DateTimeField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "name"], name="ultjobs_step_job_name"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} step {self.name!r} ({self.status})"


class JobEvent(models.Model):
    """An event sent with ``send_event``; it wakes the jobs waiting for it."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [models.Index("name", "created_at", name="ultjobs_event_name")]

    def __str__(self) -> str:
        return f"{self.name}#{self.pk}"


# -- admin views ----------------------------------------------------------------------------------
# Proxies, so the admin index lists each operator's question as a page of its own. No tables, and
# no permissions of their own (default_permissions = ()): the admin governs the in-flight and
# lost-slot pages with Job's permissions (docs/admin.md); the held slots' proxy is in fleet.py.


class InFlightJob(Job):
    """A running job whose lease is live (``visible_at`` ahead): the admin's in-flight view."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = _("in-flight job")
        verbose_name_plural = _("in-flight jobs")


class LostSlotCancellation(JobAttempt):
    """A run cancelled because it lost its fleet slot (rule 8 (lost-slot-cancels)): attempts with
    outcome slot_lost."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = _("lost-slot cancellation")
        verbose_name_plural = _("lost-slot cancellations")
