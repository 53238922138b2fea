"""CPU per drained job on each side: the worker process, and the database backends serving it.

    python -m benchmarks.drain_cpu [--jobs 30000] [--threads 128] [--repeat 3] [--settle-rows 128]
                                   [--prepare-threshold 5|off] [--capped]

The peer benchmark's CPU figure for the database is every busy CPU of the machine but the
worker's, so on a machine shared with other work it counts their CPU too. Here each side is read
from its own processes' user + system time (``/proc/<pid>/stat``): the worker's, and the backends
of the connections it opened (found in ``pg_stat_activity`` by database while it runs). Also,
the settle statement alone: one batch of ``--settle-rows`` runs, each round rolled back,
timed by its backend's ``/proc/<pid>/schedstat`` (nanoseconds on a CPU). And the statements:
per drained job in all (the database's committed transactions, one per autocommit statement),
claims and settles, and each backend's CPU per job by the statements it ran. Uses the peer
benchmark's settings and a throwaway database (``ultjobs_peers_drain_cpu``, or ``--db``); Linux
only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.drain_cpu")
    parser.add_argument("--db", default="ultjobs_peers_drain_cpu")
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--threads", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--settle-rows", type=int, default=128)
    parser.add_argument("--settle-rounds", type=int, default=40)
    parser.add_argument("--prepare-threshold", default="5",
                        help="Django's OPTIONS['prepare_threshold'] for the worker ('off': "
                             "nothing prepared)")
    parser.add_argument("--capped", action="store_true",
                        help="drain jobs of concurrency=64 (the fleet-slots drain's kind)")
    return parser.parse_args()


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None:
    os.environ.update(BENCH_PEERS_DB=ARGS.db, BENCH_PEERS_SYSTEM="ours",
                      BENCH_PEERS_CAPPED="1" if ARGS.capped else "0",
                      BENCH_PEERS_PREPARE=ARGS.prepare_threshold)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.peers.settings")
    from benchmarks.peers import common

    common.create_database(ARGS.db)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402


def on_cpu(pid: int) -> float | None:
    """Seconds process ``pid`` (all its threads) has spent on a CPU, or None once it is gone:
    user + system time, in clock ticks."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_on_cpu(pid: int) -> float:
    """Nanosecond-exact seconds on a CPU of a one-thread process (a backend): for one statement,
    where a clock tick would be too coarse."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def worker_backends() -> dict[int, str]:
    """The worker's backends, each with the named query it runs or last ran ('' for others)."""
    with connection.cursor() as cur:
        cur.execute("SELECT pid, substring(query FROM '^/\\* django_ultjobs:([a-z_]+) \\*/') "
                    "FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid()")
        return {pid: tag or "" for pid, tag in cur.fetchall()}


def commits() -> int:
    """Transactions committed in this database so far: one per statement of the worker, which
    runs each in autocommit (counted once its backend has reported, at the latest on exit; this
    connection's own, a second's worth at most, may still be unreported)."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        return cur.fetchone()[0]


def drain_once(jobs: int, threads: int) -> dict[str, float]:
    """Enqueue ``jobs`` no-op jobs, drain them with one ``runjobworker --burst``, and return
    jobs/s and each side's µs per job between the first claim and the last settle."""
    from benchmarks.peers import common, ours

    ours.ARGS = argparse.Namespace(db=ARGS.db)
    ours.reset()
    ours.bulk_enqueue(jobs, ours.jobs.peers_capped_noop if ARGS.capped else None)
    ours.analyze()
    committed = commits()
    proc = subprocess.Popen(ours.worker_cmd(threads, burst=True), cwd=common.REPO,
                            env=common.child_env(BENCH_PEERS_DB=ARGS.db), stdout=sys.stderr)
    backends: dict[int, float] = {}
    tags: dict[int, set[str]] = {}
    samples: list[tuple[float, float, float]] = []
    polls = 0
    while proc.poll() is None:
        polls += 1  # each a transaction of this connection's, taken off the count below
        for pid, tag in worker_backends().items():
            seconds = on_cpu(pid)
            if seconds is not None:
                backends[pid] = seconds
                tags.setdefault(pid, set()).add(tag)
        worker = on_cpu(proc.pid)
        if worker is not None:
            samples.append((time.time(), worker, sum(backends.values())))
        time.sleep(0.02)
    with connection.cursor() as cur:
        cur.execute("SELECT count(*), extract(epoch FROM min(claimed_at)), "
                    "extract(epoch FROM max(finished_at)) FROM django_ultjobs_job "
                    "WHERE status = 'succeeded'")
        done, start, end = cur.fetchone()
        # Each claim and each settle statement stamps its rows with its transaction's now().
        cur.execute("SELECT count(DISTINCT claimed_at), count(DISTINCT finished_at) "
                    "FROM django_ultjobs_job WHERE status = 'succeeded'")
        claims, settles = cur.fetchone()
    assert done == jobs, f"drained {done} of {jobs}"
    time.sleep(1.5)  # the backends report their counters as they exit
    (w0, d0), (w1, d1) = _at(samples, float(start)), _at(samples, float(end))
    result = {"jobs_per_s": jobs / (float(end) - float(start)),
              "worker_us": (w1 - w0) / jobs * 1e6, "db_us": (d1 - d0) / jobs * 1e6,
              "statements_per_job": (commits() - committed - polls) / jobs,
              "claims_per_job": claims / jobs, "settles_per_job": settles / jobs}
    # Each backend's CPU over the worker's life, by the statements it ran (a thread's own
    # connection runs one kind): the claim loop's, the completer's, the heartbeat's.
    by_role: dict[str, float] = {}
    for pid, seconds in backends.items():
        role = "+".join(sorted(tags[pid] - {""})) or "other"
        by_role[role] = by_role.get(role, 0.0) + seconds
    for role, seconds in by_role.items():
        result[f"backend_us[{role}]"] = seconds / jobs * 1e6
    return result


def _at(samples: list[tuple[float, float, float]], when: float) -> tuple[float, float]:
    """Both counters at ``when``, linear between the samples around it."""
    for (t0, w0, d0), (t1, w1, d1) in itertools.pairwise(samples):
        if t0 <= when <= t1:
            share = (when - t0) / (t1 - t0) if t1 > t0 else 0.0
            return w0 + (w1 - w0) * share, d0 + (d1 - d0) * share
    return samples[-1][1], samples[-1][2]


def settle_us(rows: int, rounds: int) -> float:
    """Median backend CPU µs per run of one settle statement of ``rows`` plain successes."""
    from django_ultjobs.store import Settlement, get_store

    store = get_store()
    with connection.cursor() as cur:
        cur.execute("SELECT id, claimed_at FROM django_ultjobs_job ORDER BY id LIMIT %s", [rows])
        picked = cur.fetchall()
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    times = []
    for _ in range(rounds):
        token = str(uuid.uuid4())
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("UPDATE django_ultjobs_job SET status = 'running', claim_token = %s "
                            "WHERE id = ANY(%s)", [token, [job_id for job_id, _ in picked]])
            batch = [Settlement(job_id=job_id, token=token, status="succeeded", attempt_no=1,
                                started_at=claimed_at, outcome="succeeded", result_json="null")
                     for job_id, claimed_at in picked]
            before = thread_on_cpu(pid)
            assert len(store.settle(batch, "bench")) == rows
            times.append(thread_on_cpu(pid) - before)
            transaction.set_rollback(True)
    return statistics.median(times) / rows * 1e6


def main() -> None:
    # --run-syncdb: the peers app's record table, which ours.reset() empties too.
    call_command("migrate", run_syncdb=True, verbosity=0)
    runs: list[dict[str, Any]] = []
    for n in range(ARGS.repeat):
        runs.append(drain_once(ARGS.jobs, ARGS.threads))
        print(f"drain {n + 1}: {json.dumps({k: round(v, 3) for k, v in runs[-1].items()})}",
              file=sys.stderr)
    # Over the drains that have the key: a backend's key names the statements it was seen
    # running, which may differ from drain to drain (a zero for the others halved medians).
    result = {key: statistics.median(run[key] for run in runs if key in run)
              for key in dict.fromkeys(k for run in runs for k in run)}
    result["settle_db_us"] = settle_us(ARGS.settle_rows, ARGS.settle_rounds)
    print(json.dumps({k: round(v, 3) for k, v in result.items()}))
    connection.close()
    from benchmarks.peers import common

    common.drop_database(ARGS.db)


if __name__ == "__main__":
    main()
