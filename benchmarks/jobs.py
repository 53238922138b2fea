"""The benchmark's job: a no-op, so the figures measure the queue, not the work."""

from django_ultjobs import job


@job(max_attempts=1)
def noop() -> None:
    return None


@job(max_attempts=1, concurrency=64)
def noop_capped() -> None:
    return None
