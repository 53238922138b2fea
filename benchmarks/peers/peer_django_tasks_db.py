"""django-tasks-db (the database backend of Django 6.1's Tasks API) in the peer benchmark.

    python -m benchmarks.peers.peer_django_tasks_db PHASE --db ultjobs_peers_dtdb [--jobs N]

Phases as in ``benchmarks.peers.ours`` (setup, drain, single, pickup, teardown).

Its best documented setting: Django's psycopg connection pool (``OPTIONS["pool"]``), one
``manage.py db_worker`` process (it runs one task at a time; it has no concurrency option), and
for idle pickup a short ``--interval`` (it polls; there is no LISTEN). There is no bulk API, so
"bulk" enqueue is ``task.enqueue()`` in a loop inside one transaction. Drain jobs/s comes from the
rows' own ``started_at`` / ``finished_at`` (the worker's clock), so process start-up and exit are
not counted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

from benchmarks.peers import common


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=common.PHASES)
    parser.add_argument("--db", default="ultjobs_peers_dtdb")
    parser.add_argument("--jobs", type=int, default=1_500)
    parser.add_argument("--samples", type=int, default=200, help="pickup samples")
    parser.add_argument("--interval", type=float, default=0.1,
                        help="db_worker --interval for the pickup (its own default is 1)")
    parser.add_argument("--analyze", action="store_true", help="drain: ANALYZE after the enqueue")
    parser.add_argument("--workload", choices=("noop", "django"), default="noop")
    return parser.parse_args(argv)


ARGS = parse_args(sys.argv[1:]) if __name__ == "__main__" else None
if ARGS is not None:
    os.environ["BENCH_PEERS_DB"] = ARGS.db
    os.environ["BENCH_PEERS_SYSTEM"] = "django-tasks-db"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.peers.settings")
    if ARGS.phase == "setup":
        common.create_database(ARGS.db)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django_tasks_db.models import DBTaskResult  # noqa: E402

from benchmarks.peers import tasks_django  # noqa: E402
from benchmarks.peers.models import PeersRecord  # noqa: E402

TABLE = DBTaskResult._meta.db_table


def reset() -> None:
    with connection.cursor() as cur:
        cur.execute(f"TRUNCATE {TABLE}, {PeersRecord._meta.db_table} RESTART IDENTITY CASCADE")


def worker_cmd(*extra: str) -> list[str]:
    return [sys.executable, "-m", "django", "db_worker", "--no-startup-delay", "--no-reload",
            "-v", "0", *extra]


def worker_env() -> dict[str, str]:
    return common.child_env(BENCH_PEERS_DB=ARGS.db, BENCH_PEERS_SYSTEM="django-tasks-db")


def bulk_enqueue(count: int, workload: str = "noop") -> float:
    started = time.perf_counter()
    with transaction.atomic():
        for seq in range(count):
            if workload == "django":
                tasks_django.peers_django.enqueue(seq)
            else:
                tasks_django.peers_noop.enqueue()
    return count / (time.perf_counter() - started)


def drain(expected: int) -> dict[str, float]:
    proc = subprocess.Popen(worker_cmd("--batch"), cwd=common.REPO, env=worker_env(),
                            stdout=sys.stderr)
    with common.CpuMeter(proc.pid) as meter:
        code = common.wait_or_kill(proc, max(300.0, expected / 10), "db_worker --batch")
    if code != 0:
        raise RuntimeError(f"db_worker --batch exited {code}")
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*), extract(epoch FROM min(started_at)), "
                    f"extract(epoch FROM max(finished_at)) FROM {TABLE} "
                    "WHERE status = 'SUCCESSFUL'")
        done, start, end = cur.fetchone()
    if done != expected:
        raise RuntimeError(f"django-tasks-db drain: {done} successful of {expected}")
    return common.drain_figures(expected, float(start), float(end), meter)


def pickup(interval: float, samples: int) -> dict[str, Any]:
    reset()
    probe = common.PickupProbe()
    proc = subprocess.Popen(worker_cmd("--interval", str(interval)), cwd=common.REPO,
                            env=worker_env(), stdout=sys.stderr)

    def enqueue(seq: int) -> float:
        with transaction.atomic():
            tasks_django.peers_ping.enqueue(seq, probe.port)
        return time.monotonic()

    try:
        # The random gap spans a whole poll interval, so each enqueue meets a random phase of it.
        return common.measure_pickup(enqueue, probe, samples, gap=(0.02, 0.02 + interval))
    finally:
        common.stop_worker(proc)
        probe.close()


def main() -> None:
    args = ARGS
    result: dict[str, Any] = {}
    if args.phase == "setup":
        # --run-syncdb: the Django-shaped job's table (the benchmark app has no migrations).
        call_command("migrate", run_syncdb=True, verbosity=0)
        result = {"version": common.dist_version("django-tasks-db"), "setting": "psycopg pool"}
    elif args.phase == "drain":
        reset()
        result["bulk"] = bulk_enqueue(args.jobs, args.workload)
        if args.analyze:
            with connection.cursor() as cur:
                cur.execute(f"ANALYZE {TABLE}")
        result.update(drain(args.jobs))
    elif args.phase == "single":
        reset()
        result["single_commit_ms"] = common.time_single_enqueues(tasks_django.peers_noop.enqueue)
    elif args.phase == "pickup":
        result = pickup(args.interval, args.samples)
    connection.close()
    if args.phase == "teardown":
        common.drop_database(args.db)
    common.emit(result)


if __name__ == "__main__":
    common.exit_on_sigterm()
    main()
