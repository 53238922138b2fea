"""Per-key caps and rate limits: what they cost a drain.

    BENCH_PG_NAME=ultjobs_bench_me python -m benchmarks.keyed [--jobs 10000] [--keys 1000]
        [--threads 8] [--rounds 3]                                          (PostgreSQL)

Each round drains, with one ``runjobworker --burst`` at the same ``--threads``, back to back:
``--jobs`` no-op runs spread round-robin over ``--keys`` keys uncapped, the same capped at
``concurrency=1`` per key, and the same with a rate limit that never binds (every start still
takes its bucket). Then it times the rate limiter's statement alone, and counts the worker's
statements per claim round on a keyed drain.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def drain(spec: Any, calls: list[Any], threads: int) -> float:
    """Jobs a second of one burst worker draining ``calls`` of ``spec``."""
    from django.db import transaction
    from django.db.models import Max, Min

    from django_ultjobs.models import Job, JobAttempt, RateLimitBucket, Slot

    JobAttempt.objects.all().delete()
    Job.objects.all().delete()
    Slot.objects.all().delete()
    RateLimitBucket.objects.all().delete()
    with transaction.atomic():
        spec.bulk_enqueue(calls)
    subprocess.run([sys.executable, "-m", "django", "runjobworker", "--database", "postgres",
                    "--burst", "--threads", str(threads)],
                   cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), check=True)
    done = Job.objects.filter(status="succeeded")
    assert done.count() == len(calls), done.count()
    span = done.aggregate(a=Min("claimed_at"), b=Max("finished_at"))
    return len(calls) / (span["b"] - span["a"]).total_seconds()


def take_cost(rounds: int = 2000) -> float:
    """Microseconds of one take of one bucket (``rate_take``), the statement a start adds."""
    from django_ultjobs.core.rate_limits import parse_rate_limit
    from django_ultjobs.store import get_store

    store = get_store("postgres")
    rate = parse_rate_limit("bench", "1000000/s")
    assert rate is not None
    wanted = [("job:bench", rate.interval, rate.tolerance, 1)]
    store.take_starts(wanted)
    began = time.perf_counter()
    for _ in range(rounds):
        store.take_starts(wanted)
    return (time.perf_counter() - began) / rounds * 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    os.environ.setdefault("BENCH_ALIAS", "postgres")
    import django

    django.setup()
    from django.core.management import call_command

    from benchmarks.jobs import noop_key, noop_keyed, noop_rated

    call_command("migrate", database="postgres", verbosity=0)
    keys = [i % args.keys for i in range(args.jobs)]
    cases = {
        "uncapped": (noop_key, [noop_key.call(k) for k in keys]),
        "per key": (noop_keyed, [noop_keyed.call(k) for k in keys]),
        "rate-limited": (noop_rated, [noop_rated.call() for _ in keys]),
    }
    rates: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(args.rounds):
        for label, (spec, calls) in cases.items():
            rates[label].append(drain(spec, calls, args.threads))
    base = statistics.median(rates["uncapped"])
    for label, found in rates.items():
        rate = statistics.median(found)
        print(f"{label:>13}: {rate:,.0f} jobs/s ({rate / base:.2f}x uncapped) "
              f"rounds {[round(r) for r in found]}")
    print(f"--jobs {args.jobs} --keys {args.keys} --threads {args.threads}; "
          f"one take of one bucket: {take_cost():.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
