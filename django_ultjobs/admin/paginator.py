"""A paginator that never counts a big table: exact up to a cap, the planner's estimate past it.

Django's changelist asks its paginator for ``count`` on every page. On a jobs table of a million
rows an exact ``COUNT(*)`` is a scan of the whole table (hundreds of milliseconds on PostgreSQL,
more on SQLite) for a number nobody reads to the unit. Here:

1. On PostgreSQL, the planner's row estimate for the page's query (``EXPLAIN``; for the
   unfiltered list that is ``pg_class.reltuples`` scaled to the table's current size). Above the
   cap, that is the count, shown as "about".
2. Otherwise a capped count, ``SELECT COUNT(*) FROM (SELECT id … LIMIT cap + 1)``: exact for
   small results (the in-flight view, a filtered list, a test database), and bounded work for
   large ones. Past the cap the page says "more than 10,000" (the planner, if any, guessed
   fewer, so its guess is no better).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.utils.functional import cached_property

#: Results counted exactly; more than this and the count shown is an estimate.
EXACT_UP_TO = 10_000


def planner_estimate(queryset: QuerySet[Any]) -> int | None:
    """Return PostgreSQL's estimate of how many rows ``queryset`` returns; None elsewhere."""
    if connections[queryset.db].vendor != "postgresql":
        return None
    try:
        plan = json.loads(queryset.order_by().explain(format="json"))
    except (ValueError, TypeError):  # an explain we cannot read: fall back to counting
        return None
    if isinstance(plan, list):
        plan = plan[0]
    return int(plan["Plan"]["Plan Rows"])


class EstimatedCountPaginator(Paginator):
    """A paginator whose ``count`` is exact up to ``EXACT_UP_TO`` and estimated past it."""

    exact_up_to = EXACT_UP_TO

    @cached_property
    def estimated(self) -> bool:
        """Whether ``count`` is not exact (the template then says "about" or "more than")."""
        _ = self.count
        return self._estimated

    @cached_property
    def lower_bound(self) -> bool:
        """Whether ``count`` is only "more than the cap": no estimate to show instead."""
        _ = self.count
        return self._lower_bound

    @cached_property
    def count(self) -> int:
        """Return the number of results, estimated past ``exact_up_to``; never a full count."""
        self._estimated = self._lower_bound = False
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        estimate = planner_estimate(queryset)
        if estimate is not None and estimate > self.exact_up_to:
            self._estimated = True
            return estimate
        # Only the ids, and only up to the cap: the annotations and the ordering of the page
        # query cost nothing here, and a wrong estimate costs at most cap + 1 rows.
        counted = queryset.order_by().values("pk")[: self.exact_up_to + 1].count()
        if counted <= self.exact_up_to:
            return counted
        # More than the cap, and the planner thought fewer (or there is no planner to ask).
        self._estimated = self._lower_bound = True
        return counted
