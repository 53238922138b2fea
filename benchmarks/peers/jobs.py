"""Our jobs for the peer benchmark (autodiscovered by ``django_ultjobs``)."""

import asyncio
import os
import time

from benchmarks.peers.common import (
    IO_SECONDS,
    MIX_CAP,
    MIX_LONG_SECONDS,
    MIX_SHORT_SECONDS,
    send_started,
)
from django_ultjobs import job


@job(max_attempts=1)
def peers_noop() -> None:
    return None


@job(max_attempts=1)
def peers_ping(seq: int, port: int) -> None:
    send_started(seq, port)


if os.environ.get("BENCH_PEERS_CAPPED") == "1":
    # Registered only for the fleet-slots drain: a registered capped kind changes the claim
    # statement (its own scan), so the uncapped figures are taken without it.
    @job(max_attempts=1, concurrency=64)
    def peers_capped_noop() -> None:
        return None


@job(max_attempts=1)
def peers_sleep(seconds: float) -> None:
    """Holds a thread (and so a lease the heartbeat renews) for the fleet heartbeat figure."""
    time.sleep(seconds)


# The I/O-bound workloads: a body that waits, in a thread or on a loop.
@job(max_attempts=1)
def peers_io_sync() -> None:
    time.sleep(IO_SECONDS)


if os.environ.get("BENCH_PEERS_WORKLOAD") == "io-async":
    # Registered only for its own workload: with an async kind registered a worker claims its
    # two lanes apart (rule 87 (no-claim-beyond-free-places)), so the other figures are taken
    # without it, as a sync-only site runs.
    @job(max_attempts=1)
    async def peers_io_async() -> None:
        await asyncio.sleep(IO_SECONDS)


@job(max_attempts=1)
def peers_django(seq: int) -> None:
    """The Django-shaped job: one ORM insert, one ORM read."""
    from benchmarks.peers.models import django_job_body

    django_job_body(seq)


if os.environ.get("BENCH_PEERS_WORKLOAD") == "mix":
    # The capped mix (``benchmarks.ab``): registered only for it, as the capped kind changes the
    # claim statement.
    @job(max_attempts=1)
    def peers_mix_short() -> None:
        time.sleep(MIX_SHORT_SECONDS)

    @job(max_attempts=1, concurrency=MIX_CAP)
    def peers_mix_long() -> None:
        time.sleep(MIX_LONG_SECONDS)
