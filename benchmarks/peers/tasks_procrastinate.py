"""Procrastinate's app and tasks for the peer benchmark.

The app lives in a module of its own (not the ``__main__`` of a worker process), as Procrastinate's
documentation asks, so the worker and the enqueuer find the same tasks by name. The database comes
from ``BENCH_PEERS_DB``; ``BENCH_PEERS_POOL`` sizes the connector's psycopg pool.
"""

import asyncio
import os
import time

from procrastinate import App, PsycopgConnector

from benchmarks.peers.common import IO_SECONDS, dsn, send_started

_POOL = int(os.environ.get("BENCH_PEERS_POOL", "0"))

app = App(connector=PsycopgConnector(
    conninfo=dsn(os.environ.get("BENCH_PEERS_DB", "ultjobs_peers_procrastinate")),
    **({"min_size": _POOL, "max_size": _POOL} if _POOL else {}),
))


# Async tasks: Procrastinate's concurrency runs async jobs side by side on one event loop, and its
# documentation warns against concurrency with synchronous blocking tasks.
@app.task(name="peers_noop")
async def peers_noop() -> None:
    return None


@app.task(name="peers_ping")
async def peers_ping(seq: int, port: int) -> None:
    send_started(seq, port)


# The I/O-bound workloads: a blocking body (run in the loop's default executor) and an async one.
@app.task(name="peers_io_sync")
def peers_io_sync() -> None:
    time.sleep(IO_SECONDS)


@app.task(name="peers_io_async")
async def peers_io_async() -> None:
    await asyncio.sleep(IO_SECONDS)
