"""Settings, read from ``settings.ULTJOBS`` with typed defaults.

```python
ULTJOBS = {
    "DATABASE": "default",          # the alias the job tables live in (and enqueue joins)
    "STORE": None,                  # dotted path to a custom JobStore class (tests, new engines)
    "UNKNOWN_JOB_TIMEOUT": 604800,  # seconds a job no worker knows stays parked, then fails
    "JOB_MODULES": [],              # modules outside INSTALLED_APPS a worker may import jobs from
    "MAX_RESULT_BYTES": 4 * 1024 * 1024,  # a job's result larger than this as JSON fails it
    "PRUNE_SCHEDULE": "0 3 * * *",  # when the built-in prune job runs (cron), None: never
    "STATS_TOKEN": None,            # bearer token of the stats view (/jobs/stats/), None: off
}
```
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

from .exceptions import JobConfigurationError


@dataclass(frozen=True)
class UltJobsSettings:
    """The package's settings with their defaults; unknown keys are an error, not a silent typo."""

    DATABASE: str = "default"
    STORE: str | None = None
    # How long a claimed job stays invisible without a heartbeat, and how often the worker
    # renews it. The worker's command-line flags override these.
    VISIBILITY_TIMEOUT: float = 30.0
    HEARTBEAT_INTERVAL: float = 10.0
    POLL_INTERVAL: float = 1.0
    # How long finished jobs are kept before ``prunejobs`` removes them (None keeps them).
    RETENTION_DAYS: float | None = 14.0
    # When the built-in periodic job ``django_ultjobs.prune`` runs that pruning: a cron
    # expression read in PRUNE_TIMEZONE (UTC by default), or None to turn it off (then run
    # ``manage.py prunejobs`` yourself). docs/scheduling.md.
    PRUNE_SCHEDULE: str | None = "0 3 * * *"
    PRUNE_TIMEZONE: str | None = None
    # A job no worker knows is parked (rule 12 (unknown-job-parked)) for UNKNOWN_JOB_DELAY seconds
    # at a time; once its parking began UNKNOWN_JOB_TIMEOUT seconds ago (7 days), it fails
    # (rule 12 (unknown-job-parked)). None parks for ever. docs/unknown-jobs.md.
    UNKNOWN_JOB_TIMEOUT: float | None = 7 * 24 * 3600.0
    UNKNOWN_JOB_DELAY: float = 30.0
    # Dotted module prefixes, beyond the installed apps' packages, whose jobs a worker may import
    # by name (rule 40 (project-imports-only)): e.g. ["myproject.tasks"] for django.tasks tasks
    # defined outside an app.
    JOB_MODULES: tuple[str, ...] | list[str] = ()
    # The largest result a job may return, in bytes of its JSON: a larger one fails the attempt
    # in the worker before any SQL (rule 31 (bounded-outcomes)). A result is a row in the database,
    # copied at every read; PostgreSQL refuses a JSON string over 256 MB outright.
    MAX_RESULT_BYTES: int = 4 * 1024 * 1024
    # Seconds between two reads of the queue and slot gauges by the fleet's one sampling worker
    # (rule 71 (gauges-one-reader)), when an OpenTelemetry SDK is configured; docs/operations.md.
    GAUGE_INTERVAL: float = 15.0
    # The bearer token the stats view (``/jobs/stats/`` with ``django_ultjobs.urls``) accepts
    # instead of a staff session, for an autoscaler: a string of at least 16 characters, or None
    # to accept sessions only (rule 120 (bounded-live-stats)); docs/deployment.md.
    STATS_TOKEN: str | None = None


_lock = threading.Lock()
_current: UltJobsSettings | None = None
#: Bumped whenever settings.ULTJOBS changes, so a read that straddled the change is not kept.
_generation = 0


def get_settings() -> UltJobsSettings:
    """Return the current settings, read once and again after ``override_settings``.

    Every ``enqueue()`` asks (for the database alias), so they are not read and checked again
    each time.
    """
    global _current
    current = _current
    if current is not None:
        return current
    generation = _generation
    current = _read_settings()
    with _lock:
        # A change signalled while this thread was reading may have been read or missed: keep
        # the value only if nothing changed meanwhile (the next call reads again otherwise).
        if _generation == generation:
            _current = current
    return current


def _forget_settings(*, setting: str, **kwargs: Any) -> None:
    global _current, _generation
    if setting == "ULTJOBS":
        with _lock:
            _generation += 1
            _current = None


setting_changed.connect(_forget_settings, dispatch_uid="django_ultjobs.conf")


def _read_settings() -> UltJobsSettings:
    raw: dict[str, Any] = getattr(settings, "ULTJOBS", {}) or {}
    known = {f.name for f in fields(UltJobsSettings)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise JobConfigurationError(
            f"settings.ULTJOBS has unknown keys {unknown}; known keys are {sorted(known)}"
        )
    return UltJobsSettings(**raw)


def jobs_database() -> str:
    """The database alias the job tables live in."""
    return get_settings().DATABASE
