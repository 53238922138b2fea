"""One periodic job per catch-up policy, whose ticks the clock-step tests count per instant."""

from __future__ import annotations

from django_ultjobs import job


@job(every=1, max_attempts=5, backoff=0.0)
def tick_latest() -> None:
    """Do nothing: the test counts the job rows per tick (``catch_up="latest"``)."""


@job(every=2, catch_up="none", max_attempts=5, backoff=0.0)
def tick_none() -> None:
    """Do nothing: the test counts the job rows per tick (``catch_up="none"``)."""


@job(every=1, catch_up="all", max_attempts=5, backoff=0.0)
def tick_all() -> None:
    """Do nothing: the test counts the job rows per tick (``catch_up="all"``)."""
