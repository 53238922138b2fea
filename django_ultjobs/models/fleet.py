"""The tables the fleet shares beside the jobs: fleet slots, rate-limit buckets, paused queues,
periodic jobs' schedules, and the workers' own rows."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from ..core.slot_keys import MAX_SLOT_KEY


class QueuePause(models.Model):
    """A paused queue: no worker claims from it until it is resumed (rule 75 (paused-queue)).

    One row per paused queue, read by every claim (a primary-key probe per queue the worker
    serves), so pausing is fleet-wide and takes effect at each worker's next claim. Enqueue
    never reads it: jobs keep arriving in a paused queue.
    """

    queue = models.CharField(max_length=100, primary_key=True)
    paused_at = models.DateTimeField(db_default=Now())
    #: Who paused it (``admin:<username>``, ``cli:<user>``, or what the caller passed).
    paused_by = models.CharField(max_length=200, blank=True, default="")
    reason = models.TextField(blank=True, default="")

    class Meta:
        # Governed by Job's change permission, like cancel and retry (docs/admin.md).
        default_permissions = ()
        verbose_name = _("paused queue")
        verbose_name_plural = _("paused queues")

    def __str__(self) -> str:
        return f"{self.queue} (paused)"


class Slot(models.Model):
    """One HELD fleet slot: ``(key, slot)`` is held by ``holder`` until ``expires_at``.

    A row whose ``expires_at`` has passed is a lapsed hold: free for the next acquire, and never
    renewable by its old holder (rule 7 (fenced-slot-renewal)).
    """

    id = models.BigAutoField(primary_key=True)
    key = models.CharField(max_length=MAX_SLOT_KEY)
    slot = models.PositiveIntegerField()
    holder = models.CharField(max_length=300)
    acquired_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key", "slot"], name="ultjobs_slot_key_slot"),
        ]
        verbose_name = _("fleet slot")
        verbose_name_plural = _("fleet slots")

    def __str__(self) -> str:
        return f"{self.key}[{self.slot}] held by {self.holder}"


class RateLimitBucket(models.Model):
    """The budget of one ``@job(rate_limit=...)`` (per job, or per ``rate_limit_key``): GCRA's
    theoretical arrival time ``tat`` (rule 52 (fleet-rate-limit)). A start at ``t`` conforms while
    ``tat - tolerance <= t``; each start granted pushes ``tat`` to ``max(tat, t) + interval``.

    Times are whole microseconds since 1970 on the database's clock: one integer compares and
    adds exactly, the same way on both engines.
    """

    key = models.CharField(max_length=MAX_SLOT_KEY, primary_key=True)
    tat = models.BigIntegerField()
    #: How many starts the last take granted (what the take statement answers with).
    granted = models.IntegerField(default=0)
    #: Microseconds between starts (period / N) and how far ahead tat may run, as last
    #: declared.
    interval = models.BigIntegerField()
    tolerance = models.BigIntegerField()
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name = _("rate limit")
        verbose_name_plural = _("rate limits")

    def __str__(self) -> str:
        return self.key


class JobSchedule(models.Model):
    """A periodic job's schedule across the fleet: its cursor, and whether it is paused.

    Written by the workers (each registers the periodic jobs it knows) and paused or resumed
    from the admin. ``last_tick`` is the newest tick dealt with (enqueued, or skipped as late by
    ``catch_up="none"``); it only moves forward, never past the database's clock, and a tick is
    enqueued only by the statement that moves it (rules 60 (tick-once) and
    102 (database-clock-ticks)).
    """

    name = models.CharField(max_length=200, primary_key=True)
    #: ``*/5 * * * *`` or ``every 30 s``, as the last worker to start described it.
    schedule = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, blank=True, default="")
    catch_up = models.CharField(max_length=16, default="latest")
    #: A paused schedule enqueues no tick on any worker; resumed, it starts again from now.
    paused = models.BooleanField(default=False)
    last_tick = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")

    def __str__(self) -> str:
        return self.name


class Worker(models.Model):
    """A ``runjobworker`` process, kept fresh by its heartbeat so operators can see the fleet."""

    id = models.CharField(max_length=200, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    threads = models.PositiveIntegerField()
    queues = models.JSONField(default=list)
    started_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())
    in_flight = models.PositiveIntegerField(default=0)
    stopped_at = models.DateTimeField(null=True, blank=True)
    #: The job names this worker knows (registered, or resolved since it started), so the admin
    #: can flag queued jobs no running worker knows; None from a worker that did not say.
    jobs = models.JSONField(null=True, blank=True)
    #: The worker's own ``--visibility-timeout`` and ``--heartbeat-interval`` (seconds): whether it
    #: is late or silent is judged by its own clock, not the web process's setting. Null on rows
    #: written before these were kept.
    visibility_timeout = models.FloatField(null=True, blank=True)
    heartbeat_interval = models.FloatField(null=True, blank=True)
    #: Runs of this worker still executing past their timeout, their bodies ignoring the
    #: cancellation (rule 56 (overrun-reported)): ``[{"job_id", "job", "thread", "timeout",
    #: "since"}]``; [] or None when there are none.
    overrunning = models.JSONField(null=True, blank=True)
    #: With ``runjobworker --pool process``: the child process running each of this worker's
    #: runs, ``{"<job id>": <pid>}``, written with the heartbeat when it changed (the admin's
    #: in-flight page shows it); None from a thread pool.
    runners = models.JSONField(null=True, blank=True)

    def __str__(self) -> str:
        return self.id


# A proxy, so the admin index lists the held slots as a page of their own; no permissions of its
# own: the admin governs it with Slot's (docs/admin.md).
class HeldSlot(Slot):
    """A fleet slot as the admin lists it: every slot row, held or lapsed."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = _("held slot")
        verbose_name_plural = _("held slots")
