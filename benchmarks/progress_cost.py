"""What ``ctx.set_progress`` costs a run: a call the throttle
holds back, and one write of the row (fenced on the claim token) on each engine.

    python -m benchmarks.progress_cost [--calls 200000] [--writes 500]

Run against the test settings' databases (migrated on the fly under a ``_bench`` suffix).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import timeit


def throttled_us(calls: int) -> float:
    """µs per ``set`` the throttle holds back (the writer is never reached)."""
    from django_ultjobs.runtime.progress import JobProgress

    progress = JobProgress(1, "t", lambda *_: True)
    progress.set(0, calls + 1)  # the first call writes; every later one in the second is held
    timer = timeit.Timer(lambda: progress.set(5, calls + 1, "rows"))
    return min(timer.repeat(5, calls)) / calls * 1e6


def write_ms(alias: str, writes: int) -> tuple[float, float]:
    """Median and p95 ms of one ``save_progress`` of a claimed job, in autocommit."""
    from django_ultjobs.store import NewJob, get_store

    store = get_store(alias)
    (row,) = store.enqueue([NewJob(name="bench", queue="bench_progress", priority=0, args=[],
                                   kwargs={}, max_attempts=1)])
    (claimed,) = store.claim(worker_id="bench", queues=["bench_progress"], limit=1,
                             visibility_timeout=600, caps={}, uncapped=True, kept=None)
    times = []
    for i in range(writes):
        started = time.perf_counter()
        assert store.save_progress(row.id, claimed.token, {"done": i, "total": writes,
                                                           "message": "rows"})
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--writes", type=int, default=500)
    options = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("ULTJOBS_TEST_DB_SUFFIX", "_bench")
    import django
    from django.test.utils import setup_databases, teardown_databases

    django.setup()
    created = setup_databases(verbosity=0, interactive=False, aliases={"default", "postgres"})
    try:
        print(f"throttled call: {throttled_us(options.calls):.2f} µs")
        for alias in ("default", "postgres"):
            median, p95 = write_ms(alias, options.writes)
            print(f"{alias}: one write {median:.3f} ms median, {p95:.3f} ms p95")
    finally:
        teardown_databases(created, verbosity=0)


if __name__ == "__main__":
    main()
