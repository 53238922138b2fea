"""What the paused-queue check costs each claim.

    python -m benchmarks.claim_pause [--jobs 20000] [--queues 4] [--limit 16]
                                     [--engines postgres,sqlite]

Per engine, in a child process: the claim as shipped (it leaves out paused queues,
rule 75 (paused-queue)) and the same claim with the check taken out, interleaved claim by claim over
one backlog, so both meet the same table; once with no queue paused and once with one of the
worker's queues paused. Prints the median claim time of each and their ratio: stable on a shared
machine where absolute times are not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The check as each dialect's claim includes it, and the plain list of queues it replaced.
PAUSE_CHECK = {
    "postgresql": (
        "(SELECT w.queue FROM unnest(%(queues)s::text[]) AS w(queue)\n WHERE NOT EXISTS "
        "(SELECT 1 FROM django_ultjobs_queuepause AS p WHERE p.queue = w.queue)) AS q",
        "unnest(%(queues)s::text[]) AS q(queue)"),
    "sqlite": (
        "SELECT value FROM json_each(%(queues)s)\nWHERE value NOT IN "
        "(SELECT queue FROM django_ultjobs_queuepause)",
        "SELECT value FROM json_each(%(queues)s)"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--engines", default="postgres,sqlite")
    args = parser.parse_args()
    if os.environ.get("BENCH_CHILD"):
        return measure(args)
    for engine in args.engines.split(","):
        env = dict(os.environ, DJANGO_SETTINGS_MODULE="benchmarks.settings", BENCH_ALIAS=engine,
                   BENCH_CHILD="1", PYTHONPATH=str(REPO))
        subprocess.run([sys.executable, "-m", "benchmarks.claim_pause", *sys.argv[1:]],
                       env=env, cwd=REPO, check=True)
    return 0


def measure(args: argparse.Namespace) -> int:
    import django

    django.setup()
    from django.core.management import call_command

    from django_ultjobs.models import Job, QueuePause
    from django_ultjobs.store import NewJob, get_store

    alias = os.environ["BENCH_ALIAS"]
    call_command("migrate", database=alias, verbosity=0)
    shipped = get_store(alias)
    without = get_store(alias)
    check, plain = PAUSE_CHECK[shipped.dialect]
    without.sql = {name: sql.replace(check, plain) for name, sql in shipped.sql.items()}
    assert without.sql["claim" if shipped.dialect == "postgresql" else "claim_candidates"] != \
        shipped.sql["claim" if shipped.dialect == "postgresql" else "claim_candidates"]
    queues = [f"q{i}" for i in range(args.queues)]
    for paused in (False, True):
        Job.objects.using(alias).all().delete()
        QueuePause.objects.using(alias).all().delete()
        if paused:
            QueuePause.objects.using(alias).create(queue=queues[-1])
        for start in range(0, args.jobs, 5_000):
            shipped.enqueue([NewJob(name="noop", queue=queues[i % len(queues)], priority=0,
                                    args=[], kwargs={}, max_attempts=1)
                             for i in range(start, min(args.jobs, start + 5_000))])
        if shipped.dialect == "postgresql":
            # Statistics as autovacuum would have them: a table seen for the first time plans
            # every claim as a sort of the whole backlog.
            with shipped.cursor() as cur:
                cur.execute("ANALYZE django_ultjobs_job")
                cur.execute("ANALYZE django_ultjobs_queuepause")
        times: dict[str, list[float]] = {"shipped": [], "without": []}
        while True:
            took = 0
            for label, store in (("shipped", shipped), ("without", without)):
                began = time.perf_counter()
                claimed = store.claim(worker_id="bench", queues=queues, limit=args.limit,
                                      visibility_timeout=600.0, caps={})
                times[label].append(time.perf_counter() - began)
                took += len(claimed)
            if not took or len(times["shipped"]) >= 400:
                break
        a, b = statistics.median(times["shipped"]), statistics.median(times["without"])
        print(f"{alias}: {args.jobs} jobs in {args.queues} queues, "
              f"{'one queue paused' if paused else 'none paused'}, limit {args.limit}: claim "
              f"median {a * 1e6:.0f} us with the pause check, {b * 1e6:.0f} us without "
              f"(ratio {a / b:.3f}, {len(times['shipped'])} claims each)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
