"""``EnqueuedByMiddleware``: jobs enqueued during a request record who asked for them."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.db import DatabaseError, connections
from django.http import HttpRequest, HttpResponse

from .conf import get_settings
from .observability.tracing import acting_as
from .store.sqlite import WRITER_MODES, transaction_mode


class EnqueuedByMiddleware:
    """Attribute jobs enqueued while handling a request to its user (``Job.enqueued_by``).

    Place it after ``AuthenticationMiddleware``. Anonymous requests are attributed to
    ``anonymous``. The user is looked up only if a job is actually enqueued, so requests that
    enqueue nothing pay nothing for it — except on SQLite in Django's default (deferred)
    transaction mode, where a request that carries a session cookie has its user looked up
    here, before the view opens a transaction (rule 22 (sqlite-actor-read-outside)): looked up at
    the enqueue, inside the view's ``atomic()``, those reads would come before the job's insert, and
    a deferred SQLite transaction that reads before it writes fails with "database is locked" when
    another connection wrote in between. A transaction begun as the writer (``IMMEDIATE``) has no
    such window.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with acting_as(_actor_for(request)):
            return self.get_response(request)


def _actor_for(request: HttpRequest) -> str:
    """The request's actor: resolved now when a later lookup could read inside the caller's
    deferred transaction on SQLite, else a lazy one."""
    lazy = _LazyRequestActor(request)
    if settings.SESSION_COOKIE_NAME not in request.COOKIES or not _reads_could_go_stale():
        # Without a session there is nothing to read: the user is anonymous at no cost.
        return lazy
    try:
        return lazy.resolve()
    except DatabaseError:
        # The view may not need the database at all: let it run, and fail (if it must) where
        # the user is needed, as it would without this middleware.
        return lazy


def _reads_could_go_stale() -> bool:
    """Whether a read before the job's insert could make the insert fail: the jobs database is
    SQLite and its transactions do not begin as the writer."""
    alias = get_settings().DATABASE
    if alias not in connections.settings or connections[alias].vendor != "sqlite":
        return False
    return transaction_mode(alias) not in WRITER_MODES


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
