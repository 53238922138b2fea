"""Celery's app and tasks for the peer benchmark (Redis broker, db 5 of the shared server).

A module of its own, as Celery's worker imports the app by name (``celery -A``). The broker comes
from ``BENCH_PEERS_BROKER``; ``BENCH_PEERS_PREFETCH`` sets the prefetch multiplier (Celery's
default 4). ``BENCH_PEERS_DJANGO=1`` configures the worker with Django first (``django.setup()``),
for the Django-shaped job, with Celery's connection reuse on (``CELERY_DB_REUSE_MAX``).

Durable setting: ``task_acks_late=True`` (a task's message is acknowledged after the task ran, so
a worker killed mid-task leaves it to be delivered again, as the PostgreSQL queues do). No result
backend: the jobs return nothing, and the others store no result either.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from celery import Celery, signals

from benchmarks.peers import celery_timings
from benchmarks.peers.common import IO_SECONDS, send_started

if os.environ.get("BENCH_PEERS_DJANGO") == "1":
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.peers.settings")
    django.setup()

BROKER = os.environ.get("BENCH_PEERS_BROKER", "redis://127.0.0.1:6379/5")

app = Celery("ultjobs_peers", broker=BROKER)
app.conf.update(
    task_acks_late=True,
    task_ignore_result=True,
    worker_prefetch_multiplier=int(os.environ.get("BENCH_PEERS_PREFETCH", "4")),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_default_queue="ultjobs_peers",
)
if os.environ.get("BENCH_PEERS_DJANGO") == "1":
    # Celery's Django fixup closes every connection before and after each task unless this is
    # set (it ignores CONN_MAX_AGE); set, it keeps them for this many tasks, as ours keeps its
    # threads' connections (CONN_MAX_AGE 60 in the benchmark's settings for both).
    app.conf.CELERY_DB_REUSE_MAX = 1000


@app.task(name="peers_noop")
def peers_noop() -> None:
    return None


@app.task(name="peers_ping")
def peers_ping(seq: int, port: int) -> None:
    send_started(seq, port)


@app.task(name="peers_io_sync")
def peers_io_sync() -> None:
    time.sleep(IO_SECONDS)


@app.task(name="peers_django")
def peers_django(seq: int) -> None:
    from benchmarks.peers.models import django_job_body

    django_job_body(seq)


# -- the drain clock (celery_timings): the worker's own events, written by a thread per process --

_recorder = celery_timings.Recorder()
_flusher: dict[str, Any] = {"pid": None, "client": None}


def _flush() -> None:
    value = _recorder.pending()
    if value is not None and _flusher["client"] is not None:
        _flusher["client"].hset(celery_timings.KEY, str(os.getpid()), value)


def _flush_forever() -> None:
    while True:
        time.sleep(celery_timings.FLUSH_INTERVAL)
        _flush()


def _ensure_flusher() -> None:
    # Started in the process that runs tasks (a prefork child forks after import, so the
    # thread cannot be started at import time).
    if _flusher["pid"] != os.getpid():
        import redis

        _flusher["pid"] = os.getpid()
        _flusher["client"] = redis.Redis.from_url(BROKER)
        threading.Thread(target=_flush_forever, name="timings-flush", daemon=True).start()


@signals.task_prerun.connect
def _task_started(**_: Any) -> None:
    _recorder.started(time.time())
    _ensure_flusher()


@signals.task_postrun.connect
def _task_finished(**_: Any) -> None:
    _recorder.finished(time.time())


@signals.worker_process_shutdown.connect
@signals.worker_shutdown.connect
def _last_flush(**_: Any) -> None:
    _flush()
