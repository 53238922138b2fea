"""Settings, read from ``settings.ULTJOBS`` with typed defaults.

```python
ULTJOBS = {
    "DATABASE": "default",          # the alias the job tables live in (and enqueue joins)
    "STORE": None,                  # dotted path to a custom JobStore class (tests, new engines)
}
```
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from django.conf import settings

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


def get_settings() -> UltJobsSettings:
    """Return the current settings (read each call so ``override_settings`` works in tests)."""
    raw: dict[str, Any] = getattr(settings, "ULTJOBS", {}) or {}
    known = {f.name for f in fields(UltJobsSettings)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise JobConfigurationError(
            f"settings.ULTJOBS has unknown keys {unknown}; known keys are {sorted(known)}"
        )
    return UltJobsSettings(**raw)
