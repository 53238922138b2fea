"""The pools alone, no database: the process's CPU per no-op run handed over as a claim would.

    DJANGO_SETTINGS_MODULE=benchmarks.settings python -m benchmarks.pool_ab.handoff \\
        [--runs 100000] [--passes 5] [--threads 8,32,128]

A loop like the claim loop's: wait for half the threads to be free, hand over that many no-op
runs in one ``submit_many``, until ``--runs`` have run; each pass runs both pools, the order
alternating. Prints the process's CPU (user + system) per run, which the machine's load moves
far less than wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import django

django.setup()  # DJANGO_SETTINGS_MODULE=benchmarks.settings (the pool module imports the app)

from django_ultjobs.worker.pool import ExecutorPool as Ours  # noqa: E402

from .executor_pool import ExecutorPool as Executor  # noqa: E402


def one(pool_class: type, threads: int, runs: int) -> tuple[float, float]:
    """CPU µs and wall µs per run."""
    pool = pool_class(threads, lambda run: None)
    pool.start()
    batch = max(1, threads // 2)
    before, wall = os.times(), time.perf_counter()
    handed = 0
    while handed < runs:
        pool.wait_for_free(1.0, at_least=batch)
        n = min(pool.free(), runs - handed)
        pool.submit_many([object()] * n)
        handed += n
    pool.wait_idle(None)
    after, wall = os.times(), time.perf_counter() - wall
    pool.stop(timeout=5)
    cpu = (after.user - before.user) + (after.system - before.system)
    return cpu / runs * 1e6, wall / runs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--threads", default="8,32,128")
    args = parser.parse_args()
    figures: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for n in range(args.passes):
        pools = (("ours", Ours), ("executor", Executor))
        for threads in (int(t) for t in args.threads.split(",")):
            for name, cls in pools if n % 2 == 0 else pools[::-1]:
                figures.setdefault((threads, name), []).append(one(cls, threads, args.runs))
    print("--threads | pool | CPU us/run, median (min-max) | wall us/run, median (min-max)")
    print("--- | --- | --- | ---")
    for (threads, name), rows in sorted(figures.items(),
                                        key=lambda i: (i[0][0], i[0][1] != "ours")):
        cpu, wall = [r[0] for r in rows], [r[1] for r in rows]
        print(f"{threads} | {name} | {statistics.median(cpu):.1f} ({min(cpu):.1f}-{max(cpu):.1f})"
              f" | {statistics.median(wall):.1f} ({min(wall):.1f}-{max(wall):.1f})")


main()
