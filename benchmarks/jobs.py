"""The benchmark's job: a no-op, so the figures measure the queue, not the work."""

from django_ultjobs import job


@job(max_attempts=1)
def noop() -> None:
    return None


@job(max_attempts=1, concurrency=64)
def noop_capped() -> None:
    return None


@job(max_attempts=1, concurrency=1, concurrency_key="key")
def noop_keyed(key: int) -> None:
    return None


@job(max_attempts=1)
def noop_key(key: int) -> None:
    """``noop_keyed`` without its cap: the same arguments, the same rows."""
    return None


@job(max_attempts=1, rate_limit="1000000/s")
def noop_rated() -> None:
    """A rate limit that never binds: what a take costs a start, and nothing else."""
    return None
