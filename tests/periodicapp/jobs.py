"""``every_second``: a periodic job whose runs the scheduling acceptance tests count."""

from __future__ import annotations

from django_ultjobs import job


@job(every=1, max_attempts=5, backoff=0.0)
def every_second() -> None:
    """Do nothing: the test counts the job rows per tick and their attempts."""
