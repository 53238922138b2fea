"""What every jobs admin page shares: the jobs database, read-only rules, permissions, speed."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.contrib import admin
from django.contrib.admin import ShowFacets
from django.contrib.auth import get_permission_codename
from django.db import DatabaseError, models, transaction
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver
from django.utils.text import capfirst
from django.utils.translation import gettext

from ..conf import jobs_database
from ..store import get_store, unmigrated_message
from .display import EMPTY
from .page_options import page_options, without_options
from .paginator import EstimatedCountPaginator


def actor(request: HttpRequest) -> str:
    """Who acts, as the operations log it: ``admin:<username>``."""
    return f"admin:{request.user.get_username()}"


def tables_missing(exc: BaseException) -> str | None:
    """The one line saying to run ``migrate`` when ``exc`` is a missing table of this package
    in the jobs database (rule 109 (missing-tables-named)), else None."""
    alias = jobs_database()
    if not isinstance(exc, DatabaseError) or not get_store(alias).tables_missing(exc):
        return None
    return unmigrated_message(alias)


@dataclass(frozen=True)
class TablesMissing:
    """What a page shows in place of its figures on a database nobody migrated
    (rule 109 (missing-tables-named))."""

    tables_missing: str


def savepoint_if_atomic() -> AbstractContextManager[Any]:
    """A savepoint on the jobs database inside a transaction (``ATOMIC_REQUESTS``), else
    nothing: on PostgreSQL a failed statement aborts the transaction, and the page saying why
    must still read the user's permissions and save the session."""
    alias = jobs_database()
    if transaction.get_connection(alias).in_atomic_block:
        return transaction.atomic(using=alias)
    return nullcontext()


def _rendered(view: Callable[..., HttpResponse], request: HttpRequest, *args: Any,
              **kwargs: Any) -> HttpResponse:
    """``view``'s response, rendered now, where a failing query can still be answered (a
    template response is otherwise rendered after the view returns)."""
    with savepoint_if_atomic():
        response = view(request, *args, **kwargs)
        if isinstance(response, TemplateResponse):
            response.render()
        return response


def unmigrated_page(admin_site: admin.AdminSite, request: HttpRequest,
                    message: str) -> TemplateResponse:
    """The admin's own page (its header and navigation) with ``message`` alone, 503."""
    context = {**admin_site.each_context(request), "title": gettext("Jobs"),
               "ultjobs_tables_missing": message}
    return TemplateResponse(request, "admin/django_ultjobs/unmigrated.html", context, status=503)


class JobsAdmin(admin.ModelAdmin):
    """A model admin over the jobs database that stays fast on a table of millions of rows.

    The rows live in ``ULTJOBS["DATABASE"]``, which need not be the router's choice (a site on
    SQLite with its jobs on PostgreSQL), so every read goes there explicitly. Each row carries the
    database's clock as ``db_now``: "expires in 12 s" must be judged by the clock the leases are
    judged by, never the web server's (hosts' clocks disagree; the database is the referee).
    """

    #: Never count the unfiltered table: COUNT(*) over a million rows is a sequential scan.
    show_full_result_count = False
    #: Filter facets count every choice over the whole table: off, whatever the URL asks.
    show_facets = ShowFacets.NEVER
    #: Counts exactly up to a cap, then shows the planner's estimate (see the paginator).
    paginator = EstimatedCountPaginator
    list_per_page = 50
    empty_value_display = EMPTY
    #: A model whose permissions govern this page (None: the page's own model). The proxies have
    #: no permissions of their own, so "can view job" is enough to see every jobs page.
    permission_model: type[models.Model] | None = None

    #: Whether a row links to a page of its own: the list is then titled "Select job to view",
    #: as Django titles a view-only model's list; else by what it lists ("Held slots").
    rows_have_pages = True
    #: Whether the page offers auto-refresh (``?refresh=30``: rule 83 (refresh-on-request)), and
    #: charts of a job name's runs when the list is filtered by name (``?name=...``,
    #: ``?charts=24h``).
    offers_refresh = False
    offers_charts = False

    def get_queryset(self, request: HttpRequest) -> models.QuerySet[Any]:
        """Read from the jobs database, with the database's clock on every row."""
        return super().get_queryset(request).using(jobs_database()).annotate(db_now=Now())

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> Any:
        """Title the list for what it is: no row is ever changed through a form here."""
        # Django says "Select job to change" to anyone allowed the actions (which need the
        # change permission), though every page of a row is read-only.
        opts = self.model._meta
        # Django's own words for a view-only list, so its catalogs translate them too.
        title = (gettext("Select %s to view") % opts.verbose_name if self.rows_have_pages
                 else capfirst(opts.verbose_name_plural))
        options = page_options(request.GET, charts=self.offers_charts,
                               refresh=self.offers_refresh)
        request.GET = without_options(request.GET)
        context = {"title": title, "ultjobs_options": options,
                   "ultjobs_refresh": options.refresh if self.offers_refresh else None}
        if self.offers_charts:
            context["ultjobs_chart_name"] = request.GET.get("name") or None
        return super().changelist_view(request, {**context, **(extra_context or {})})

    def get_urls(self) -> list[URLPattern | URLResolver]:
        """Every page of this admin, saying "run migrate" on a database nobody migrated."""
        return [URLPattern(p.pattern, self._unless_unmigrated(p.callback), p.default_args,
                           p.name) if isinstance(p, URLPattern) else p
                for p in super().get_urls()]

    def _unless_unmigrated(self, view: Callable[..., HttpResponse]
                           ) -> Callable[..., HttpResponse]:
        """``view``, answering the one line of ``tables_missing`` (503) instead of the
        database's "no such table" (rule 109 (missing-tables-named)); every other error passes as it
        was."""
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                return _rendered(view, request, *args, **kwargs)
            except DatabaseError as exc:
                message = tables_missing(exc)
                if message is None:
                    raise
                return unmigrated_page(self.admin_site, request, message)

        return wrapper

    def get_model_perms(self, request: HttpRequest) -> dict[str, bool]:
        """Report no change permission to the index, so it links the pages as "View"."""
        # Only the index and the sidebar read this; the actions check has_change_permission.
        return {**super().get_model_perms(request), "change": False}

    # -- permissions -----------------------------------------------------------------------------

    def _has_perm(self, request: HttpRequest, action: str) -> bool:
        opts = (self.permission_model or self.model)._meta
        codename = get_permission_codename(action, opts)
        return request.user.has_perm(f"{opts.app_label}.{codename}")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """See with the view (or change) permission of the governing model."""
        return self._has_perm(request, "view") or self._has_perm(request, "change")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Act only with the change permission; no row is ever edited through a form."""
        # A detail page is read-only for everybody: an operator cancels or retries (actions,
        # checked here with obj=None), never edits a job's row by hand under its worker.
        return obj is None and self._has_perm(request, "change")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Add nothing: jobs are enqueued by code, leases and attempts written by workers."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Delete nothing: deleting a running job's row is a lost lease for its worker."""
        # Pruning finished jobs is the retention setting's work (prunejobs), not a click.
        return False


class ReadOnlyInline(admin.TabularInline):
    """A read-only inline of a job's history on the jobs database, visible with the job."""

    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = False

    def get_queryset(self, request: HttpRequest) -> models.QuerySet[Any]:
        """Read from the jobs database."""
        return super().get_queryset(request).using(jobs_database())

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A job's attempts and steps are part of the job: its view permission shows them."""
        opts = self.parent_model._meta
        return any(request.user.has_perm(f"{opts.app_label}.{get_permission_codename(a, opts)}")
                   for a in ("view", "change"))

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Add nothing."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Change nothing."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Delete nothing."""
        return False
