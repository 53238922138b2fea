"""Fleet-slot cost: drain N no-op jobs with concurrency=64 and N without, back to back.

    python -m benchmarks.capped [--jobs 10000] [--threads 64] [--rounds 2]   (PostgreSQL)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    os.environ.setdefault("BENCH_ALIAS", "postgres")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction
    from django.db.models import Max, Min

    from benchmarks.jobs import noop, noop_capped
    from django_ultjobs.models import Job, JobAttempt, Slot

    call_command("migrate", database="postgres", verbosity=0)
    rates: dict[str, list[float]] = {"uncapped": [], "capped": []}
    for _ in range(args.rounds):
        for label, spec in (("uncapped", noop), ("capped", noop_capped)):
            JobAttempt.objects.all().delete()
            Job.objects.all().delete()
            Slot.objects.all().delete()
            with transaction.atomic():
                spec.bulk_enqueue([()] * args.jobs)
            subprocess.run([sys.executable, "-m", "django", "runjobworker", "--database",
                            "postgres", "--burst", "--threads", str(args.threads)],
                           cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), check=True)
            done = Job.objects.filter(status="succeeded")
            assert done.count() == args.jobs, done.count()
            span = done.aggregate(a=Min("claimed_at"), b=Max("finished_at"))
            rates[label].append(args.jobs / (span["b"] - span["a"]).total_seconds())
    un, cap = statistics.median(rates["uncapped"]), statistics.median(rates["capped"])
    print(f"uncapped {un:,.0f} jobs/s, concurrency=64 {cap:,.0f} jobs/s: "
          f"{cap / un:.2f}x ({(1 - cap / un) * 100:.0f} % cost); rounds {rates}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
