"""Worker CPU per job of three pieces of a drained no-op job's path,
for A/B runs of two checkouts one after the other:

    python -m benchmarks.drain_micro claim|run|dispatch [--tree PATH]

``claim``: ``JobStore.claimed_batch`` on 128 synthetic no-argument PostgreSQL rows;
``run``: ``run_job`` of a registered no-op body (no tracer or meter SDK, no receivers);
``dispatch``: 128 ``Run`` objects, their older runs looked up among 2,000 in flight, and their
settling flag. ``--tree`` imports ``django_ultjobs`` from that checkout (a ``git archive`` of
the other commit) instead of this one. Prints the median µs per job of 300 rounds of process
CPU time.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
import types
from collections.abc import Callable
from typing import Any

NOW = datetime.datetime.now(datetime.UTC)


def _claimed(job_id: int, name: str) -> Any:
    from django_ultjobs.store import ClaimedJob

    return ClaimedJob(id=job_id, name=name, queue="default", priority=0, args=[], kwargs={},
                      attempt=1, max_attempts=3, token="t", traceparent="", tracestate="",
                      enqueued_by="", cancel_requested=False, claimed_at=NOW, due_at=NOW)


def claim() -> Callable[[], int]:
    from django_ultjobs.store.base import JobStore

    rows = [(i, "bench.noop", "default", 0, "[]", "{}", 1, 3, None, None, "", False, NOW, None,
             None, "", "queued", None, None, NOW) for i in range(128)]
    previous = [r[16:20] for r in rows]
    store = types.SimpleNamespace(parse_time=JobStore.parse_time)

    def once() -> int:
        JobStore.claimed_batch(store, rows, previous, "token", {})  # type: ignore[arg-type]
        return len(rows)
    return once


def run() -> Callable[[], int]:
    from benchmarks.peers.jobs import peers_noop
    from django_ultjobs.worker.executor import run_job
    from django_ultjobs.worker.runs import Run

    store: Any = types.SimpleNamespace(save_progress=None)

    def once() -> int:
        runs = [Run(job=_claimed(i, peers_noop.name), spec=peers_noop) for i in range(200)]
        for r in runs:
            run_job(r, store=store, worker_id="w", on_started=lambda: None)
        return len(runs)
    return once


def dispatch() -> Callable[[], int]:
    from django_ultjobs.worker.runs import Run, RunsInFlight

    in_flight = RunsInFlight()
    for i in range(2000):
        in_flight.add(Run(job=_claimed(10**6 + i, "x"), spec=None))
    jobs = [_claimed(i, "x") for i in range(128)]
    batched = hasattr(in_flight, "others_of_each")

    def once() -> int:
        runs = [Run(job=job, spec=None) for job in jobs]
        if batched:
            in_flight.others_of_each(runs)
        else:
            [in_flight.others_of(r) for r in runs]
        for r in runs:
            r.start_settling()
        return len(runs)
    return once


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.drain_micro")
    parser.add_argument("piece", choices=["claim", "run", "dispatch"])
    parser.add_argument("--tree", default=None)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    if args.tree:
        sys.path.insert(0, os.path.abspath(args.tree))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.peers.settings")
    os.environ.setdefault("BENCH_PEERS_SYSTEM", "ours")
    import django

    django.setup()
    once = {"claim": claim, "run": run, "dispatch": dispatch}[args.piece]()
    per_job = []
    for _ in range(args.rounds):
        started, jobs = time.process_time(), 0
        for _ in range(10):
            jobs += once()
        per_job.append((time.process_time() - started) / jobs * 1e6)
    import django_ultjobs

    print(f"{args.piece} {os.path.dirname(os.path.dirname(django_ultjobs.__file__))} "
          f"{statistics.median(per_job):.2f} us/job")


if __name__ == "__main__":
    main()
