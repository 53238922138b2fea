"""The benchmark's job: a no-op, so the figures measure the queue, not the work."""

import asyncio
import os

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


if os.environ.get("BENCH_ASYNC_JOBS"):
    # Registered only for benchmarks.async_lane: with an async def kind registered every claim
    # is split by lane, which the other benchmarks must not pay.

    @job(max_attempts=1)
    async def async_sleep(seconds: float) -> None:
        """Waits on the worker's event loop: the async lane's own work."""
        await asyncio.sleep(seconds)

    @job(max_attempts=1)
    def thread_loop_sleep(seconds: float) -> None:
        """The same wait as a loop of its own on an executor thread: what an async body cost
        before the async lane (``asyncio.run`` per run, as many at once as threads)."""
        asyncio.run(asyncio.sleep(seconds))
