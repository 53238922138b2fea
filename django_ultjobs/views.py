"""The stats view: the queues' figures as JSON, for an autoscaler or a dashboard
(rule 120 (bounded-live-stats)).

Mounted by ``django_ultjobs.urls`` (``path("jobs/", include("django_ultjobs.urls"))`` serves
``/jobs/stats/``). Allowed for an active staff user with the view (or change) permission on
jobs, or for ``Authorization: Bearer <ULTJOBS["STATS_TOKEN"]>``, the token compared in constant
time; anything else is 403 with no figure in it.
"""

from __future__ import annotations

import hmac

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from .admin.base import tables_missing
from .conf import get_settings, jobs_database
from .queue_stats import stats

#: What ``Authorization`` starts with when it carries the token.
BEARER = "bearer "


def token_allowed(request: HttpRequest) -> bool:
    """Whether the request carries ``ULTJOBS["STATS_TOKEN"]`` as a bearer token."""
    token = get_settings().STATS_TOKEN
    given = request.headers.get("Authorization", "")
    if not isinstance(token, str) or not token or given[:len(BEARER)].lower() != BEARER:
        return False
    # Bytes: compare_digest refuses a str holding anything but ASCII.
    return hmac.compare_digest(given[len(BEARER):].strip().encode(), token.encode())


def session_allowed(request: HttpRequest) -> bool:
    """Whether the request's user is active staff allowed to view jobs."""
    user = getattr(request, "user", None)
    if user is None or not user.is_active or not user.is_staff:
        return False
    return user.has_perm("django_ultjobs.view_job") or user.has_perm("django_ultjobs.change_job")


@never_cache
@require_safe
def stats_view(request: HttpRequest) -> HttpResponse:
    """The queues' figures and the workers alive, as JSON; 403 with none of them otherwise."""
    # The token first: an autoscaler's request then never loads a session.
    if not (token_allowed(request) or session_allowed(request)):
        return JsonResponse({"error": "forbidden"}, status=403)
    try:
        return JsonResponse(stats(jobs_database()))
    except DatabaseError as exc:
        message = tables_missing(exc)
        if message is None:
            raise
        return JsonResponse({"error": message}, status=503)
