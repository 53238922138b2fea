"""``EnqueuedByMiddleware``: jobs enqueued during a request record who asked for them."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from .tracing import acting_as


class EnqueuedByMiddleware:
    """Attribute jobs enqueued while handling a request to its user (``Job.enqueued_by``).

    Place it after ``AuthenticationMiddleware``. Anonymous requests are attributed to
    ``anonymous``; the user is only looked up if a job is actually enqueued, so requests that
    enqueue nothing pay nothing for it.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with acting_as(_LazyRequestActor(request)):
            return self.get_response(request)


class _LazyRequestActor(str):
    """A ``str`` that names the request's user, read when a job is enqueued, not before."""

    __slots__ = ("_request",)

    def __new__(cls, request: HttpRequest) -> _LazyRequestActor:
        obj = super().__new__(cls, "request")
        obj._request = request
        return obj

    def resolve(self) -> str:
        user = getattr(self._request, "user", None)
        if user is None or not getattr(user, "is_authenticated", False):
            return "anonymous"
        return f"user:{user.get_username()}"[:200]
