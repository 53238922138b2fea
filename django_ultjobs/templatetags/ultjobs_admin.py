"""Template tags of the jobs admin: ``{% ultjobs_summary as summary %}`` for the app index."""

from __future__ import annotations

from typing import Any

from django import template

from ..admin.summary import Summary, jobs_summary
from ..conf import jobs_database

register = template.Library()


@register.simple_tag(takes_context=True)
def ultjobs_summary(context: dict[str, Any]) -> Summary | None:
    """Return the jobs summary, or None for a user who may not view jobs."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not (user.has_perm("django_ultjobs.view_job")
                            or user.has_perm("django_ultjobs.change_job")):
        return None
    return jobs_summary(jobs_database())


@register.filter
def thousands(value: int) -> str:
    """Return ``1234567`` as ``1,234,567`` (django.contrib.humanize need not be installed)."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)
