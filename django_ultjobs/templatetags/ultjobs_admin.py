"""Template tags of the jobs admin: the summary and the charts of the app index, page options."""

from __future__ import annotations

from typing import Any

from django import template
from django.db import DatabaseError

from ..admin.base import TablesMissing, savepoint_if_atomic, tables_missing
from ..admin.chart_view import ChartsView, charts_view
from ..admin.page_options import PageOptions, page_options
from ..admin.summary import Summary, jobs_summary
from ..conf import jobs_database

register = template.Library()


def _may_view_jobs(context: dict[str, Any]) -> bool:
    user = getattr(context.get("request"), "user", None)
    return user is not None and (user.has_perm("django_ultjobs.view_job")
                                 or user.has_perm("django_ultjobs.change_job"))


@register.simple_tag(takes_context=True)
def ultjobs_summary(context: dict[str, Any]) -> Summary | TablesMissing | None:
    """Return the jobs summary, or None for a user who may not view jobs; on a database nobody
    migrated, the line that says to (rule 109 (missing-tables-named))."""
    if not _may_view_jobs(context):
        return None
    try:
        with savepoint_if_atomic():
            return jobs_summary(jobs_database())
    except DatabaseError as exc:
        message = tables_missing(exc)
        if message is None:
            raise
        return TablesMissing(message)


@register.simple_tag(takes_context=True)
def ultjobs_page_options(context: dict[str, Any]) -> PageOptions:
    """Return the charts' window and the auto-refresh the page's query string asks for."""
    request = context.get("request")
    return page_options(request.GET) if request is not None else PageOptions()


@register.simple_tag(takes_context=True)
def ultjobs_charts(context: dict[str, Any], options: PageOptions,
                   name: str | None = None) -> ChartsView | None:
    """Return the charts of every job (or of job ``name``), or None for a user who may not
    view jobs."""
    if not _may_view_jobs(context):
        return None
    return charts_view(jobs_database(), options.span, name or None)


@register.filter
def thousands(value: int) -> str:
    """Return ``1234567`` as ``1,234,567`` (django.contrib.humanize need not be installed)."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)
