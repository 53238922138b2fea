"""System checks: misconfiguration reported by ``manage.py check`` with stable ids."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Warning, register
from django.db import connections

from .conf import get_settings
from .exceptions import JobConfigurationError


@register("django_ultjobs")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check ``ULTJOBS`` and the database it points at."""
    try:
        conf = get_settings()
    except JobConfigurationError as exc:
        return [Error(str(exc), id="django_ultjobs.E001")]
    messages: list[CheckMessage] = []
    if conf.DATABASE not in connections.settings:
        messages.append(Error(
            f"ULTJOBS['DATABASE'] is {conf.DATABASE!r}, which is not in DATABASES",
            hint="Set it to the alias that holds the job tables.",
            id="django_ultjobs.E002",
        ))
        return messages
    vendor = connections[conf.DATABASE].vendor
    if vendor not in {"postgresql", "sqlite"} and not conf.STORE:
        messages.append(Error(
            f"DATABASES[{conf.DATABASE!r}] is {vendor}; django_ultjobs runs on PostgreSQL "
            "and SQLite",
            id="django_ultjobs.E003",
        ))
    if conf.HEARTBEAT_INTERVAL * 2 > conf.VISIBILITY_TIMEOUT:
        messages.append(Warning(
            "ULTJOBS HEARTBEAT_INTERVAL is more than half of VISIBILITY_TIMEOUT: one failed "
            "heartbeat could cost a running job its lease",
            hint="Use a heartbeat interval of a third of the timeout or less.",
            id="django_ultjobs.W001",
        ))
    return messages
