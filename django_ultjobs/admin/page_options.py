"""What an operator picks in a jobs page's URL: the charts' window and auto-refresh.

``?charts=24h`` widens the charts to the last day; ``?refresh=30`` reloads the page every 30
seconds through a ``<meta http-equiv="refresh">`` (rule 83 (refresh-on-request)): no script, so no
Content-Security-Policy has anything to refuse, and a wall screen left open keeps itself current.
Both are off unless asked for, and a value not on offer is the default (off, the hour), never an
error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.http import QueryDict
from django.utils.translation import gettext_lazy as _

from .charts import DEFAULT_SPAN, SPANS, Span, span_of

CHARTS_PARAM = "charts"
REFRESH_PARAM = "refresh"
#: The reload intervals on offer, in seconds. Under 10 s a page of a big table would spend a
#: noticeable share of the database on one screen; over a minute it is no longer "live".
REFRESH_CHOICES = (10, 30, 60)


@dataclass(frozen=True)
class Choice:
    """One link of a switch: its label, its URL's query string, whether it is the current one."""

    label: str
    query: str
    current: bool


@dataclass(frozen=True)
class PageOptions:
    """The window of the charts and the auto-refresh of one page view."""

    span: Span = DEFAULT_SPAN
    refresh: int | None = None
    spans: list[Choice] = field(default_factory=list)
    refreshes: list[Choice] = field(default_factory=list)


def refresh_of(value: object) -> int | None:
    """Return the reload interval a ``?refresh=`` value names, or None (off)."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        seconds = int(value)
        return seconds if seconds in REFRESH_CHOICES else None
    return None


def _with(get: QueryDict, param: str, value: str | None) -> str:
    """The query string of ``get`` with ``param`` set to ``value`` (removed for None)."""
    query = get.copy()
    query.pop(param, None)
    if value is not None:
        query[param] = value
    encoded = query.urlencode()
    return f"?{encoded}" if encoded else "?"


def page_options(get: QueryDict, *, charts: bool = True, refresh: bool = True) -> PageOptions:
    """Read the page's options from its query string, with the links that change them."""
    span = span_of(get.get(CHARTS_PARAM))
    seconds = refresh_of(get.get(REFRESH_PARAM))
    spans = [Choice(str(s.label), _with(get, CHARTS_PARAM, key), s is span)
             for key, s in SPANS.items()] if charts else []
    refreshes = [Choice(str(_("off")), _with(get, REFRESH_PARAM, None), seconds is None)]
    refreshes += [Choice(f"{n} s", _with(get, REFRESH_PARAM, str(n)), seconds == n)
                  for n in REFRESH_CHOICES]
    return PageOptions(span=span, refresh=seconds, spans=spans,
                       refreshes=refreshes if refresh else [])


def without_options(get: QueryDict) -> QueryDict:
    """Return ``get`` without this module's parameters (Django's changelist refuses unknown
    ones: it would answer ``?e=1``)."""
    if CHARTS_PARAM not in get and REFRESH_PARAM not in get:
        return get
    query = get.copy()
    query.pop(CHARTS_PARAM, None)
    query.pop(REFRESH_PARAM, None)
    return query
