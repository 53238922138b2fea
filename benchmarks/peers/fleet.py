"""What a fleet of our workers costs one PostgreSQL: 1, 4 and 16 ``runjobworker`` processes.

    python -m benchmarks.peers.fleet [--workers 1,4,16] [--jobs 40000] [--threads 8]

For each fleet size, on a fresh database (``ultjobs_peers_fleet``):

- drain: N no-op jobs drained by W ``runjobworker --burst`` processes started together; jobs/s
  from the database's timestamps (first claim to last settle), and the most connections the
  database saw open on it while they ran (``pg_stat_activity``, sampled every 50 ms);
- steady state: W workers whose every thread holds a sleeping job, so the claim loop is quiet and
  all the database sees is the heartbeat; over ``--window`` seconds, transactions committed in the
  database (``pg_stat_database.xact_commit``; every statement a worker sends outside a transaction
  block is one) and the rows of the worker table updated (one ``worker_touch`` per worker per beat).
  Measured at ``--heartbeat-interval 1`` so a short window sees many ticks; statements scale as
  1/interval, and the report also gives them at the default 10 s;
- idle: W workers with nothing to do, at the default intervals (poll 1 s, heartbeat 10 s):
  statements/s over ``--window``; then a trickle of ``--trickle-rate`` single enqueues a second
  for ``--trickle-seconds``: statements the fleet sends per enqueue (each commit notifies every
  listening worker of the queue, and each woken worker claims).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from typing import Any

from benchmarks.peers import common
from benchmarks.peers.common import log


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.peers.fleet")
    p.add_argument("--db", default="ultjobs_peers_fleet")
    p.add_argument("--workers", default="1,4,16")
    p.add_argument("--jobs", type=int, default=40_000)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--window", type=float, default=20.0)
    p.add_argument("--heartbeat-interval", type=float, default=1.0)
    p.add_argument("--trickle-rate", type=float, default=20.0)
    p.add_argument("--trickle-seconds", type=float, default=10.0)
    p.add_argument("--keep-database", action="store_true")
    return p.parse_args(argv)


ARGS = parse_args(sys.argv[1:]) if __name__ == "__main__" else None
if ARGS is not None:
    os.environ["BENCH_PEERS_DB"] = ARGS.db
    os.environ["BENCH_PEERS_SYSTEM"] = "ours"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.peers.settings")
    common.create_database(ARGS.db)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from benchmarks.peers import jobs  # noqa: E402
from benchmarks.peers.ours import bulk_enqueue, reset  # noqa: E402


def worker_env() -> dict[str, str]:
    return common.child_env(BENCH_PEERS_DB=ARGS.db, BENCH_PEERS_SYSTEM="ours",
                            BENCH_PEERS_CAPPED="0")


def start_workers(count: int, *flags: str) -> list[subprocess.Popen]:
    cmd = [sys.executable, "-m", "django", "runjobworker", "--threads", str(ARGS.threads), *flags]
    return [subprocess.Popen(cmd, cwd=common.REPO, env=worker_env(), stdout=sys.stderr)
            for _ in range(count)]


class ConnectionWatch:
    """Samples how many sessions are connected to the database, in a thread of its own."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ConnectionWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        import psycopg

        with psycopg.connect(common.dsn("postgres"), autocommit=True) as conn:
            while not self._stop.wait(0.05):
                n = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                                 "AND pid <> pg_backend_pid()", [ARGS.db]).fetchone()[0]
                self.peak = max(self.peak, n)


def drain(count: int) -> dict[str, Any]:
    reset()
    bulk_enqueue(ARGS.jobs)
    connection.close()  # so the peak below counts the workers' sessions only
    with ConnectionWatch() as watch:
        procs = start_workers(count, "--burst")
        for proc in procs:
            if common.wait_or_kill(proc, 600, "runjobworker --burst") != 0:
                raise RuntimeError("a worker of the fleet failed")
    with connection.cursor() as cur:
        cur.execute("SELECT count(*), count(DISTINCT worker_id), "
                    "extract(epoch FROM max(finished_at) - min(claimed_at)) "
                    "FROM django_ultjobs_job WHERE status = 'succeeded'")
        done, workers, seconds = cur.fetchone()
    if done != ARGS.jobs:
        raise RuntimeError(f"fleet drain left {ARGS.jobs - done} jobs")
    return {"jobs_per_s": ARGS.jobs / float(seconds), "seconds": float(seconds),
            "workers_that_ran_jobs": workers, "peak_connections": watch.peak}


def counters() -> tuple[int, int, int]:
    """(transactions committed in the database, worker-row updates, job-row updates) so far.

    The transaction count is read from a session in another database, so reading it adds nothing;
    the table counts need a session in this one: one statement per call, which the caller
    subtracts."""
    import psycopg

    with psycopg.connect(common.dsn("postgres"), autocommit=True) as conn:
        xacts = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                             [ARGS.db]).fetchone()[0]
    with connection.cursor() as cur:
        cur.execute("SELECT relname, n_tup_upd FROM pg_stat_user_tables "
                    "WHERE relname IN ('django_ultjobs_worker', 'django_ultjobs_job')")
        upd = dict(cur.fetchall())
    return xacts, upd.get("django_ultjobs_worker", 0), upd.get("django_ultjobs_job", 0)


def steady_state(count: int) -> dict[str, Any]:
    reset()
    runs = count * ARGS.threads
    jobs.peers_sleep.bulk_enqueue([(ARGS.window + 120,)] * runs)
    interval = ARGS.heartbeat_interval
    procs = start_workers(count, "--heartbeat-interval", str(interval),
                          "--visibility-timeout", str(max(5.0, interval * 5)))
    try:
        deadline = time.monotonic() + 120
        while True:
            with connection.cursor() as cur:
                cur.execute("SELECT count(*) FROM django_ultjobs_job WHERE status = 'running'")
                running = cur.fetchone()[0]
            if running == runs:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {running} of {runs} sleeping jobs started")
            time.sleep(0.2)
        # Past start-up, and past PostgreSQL's statistics lag: a busy backend reports its counts
        # at most once a second and an idle one within 10 s, so start-up's statements (the
        # claims, the connection set-up) must be reported before the window opens.
        time.sleep(max(interval * 3, 11.0))
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                        "AND pid <> pg_backend_pid()", [ARGS.db])
            sessions = cur.fetchone()[0]
        x0, w0, j0 = counters()
        t0 = time.monotonic()
        time.sleep(ARGS.window)
        x1, w1, j1 = counters()
        seconds = time.monotonic() - t0
    finally:
        # The sleeping bodies would hold a graceful stop for their whole sleep: kill instead.
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
    # The first counters() call's table read is this session's one transaction in the window.
    statements = (x1 - x0 - 1) / seconds
    return {
        "runs": runs,
        "idle_sessions": sessions,
        "statements_per_s": statements,
        "worker_touch_per_s": (w1 - w0) / seconds,
        "heartbeat_rows_per_s": (j1 - j0) / seconds,
        "statements_per_worker_beat": statements * interval / count,
        "statements_per_s_at_10s": statements * interval / 10.0,
    }


def xact_commit() -> int:
    import psycopg

    with psycopg.connect(common.dsn("postgres"), autocommit=True) as conn:
        return conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                            [ARGS.db]).fetchone()[0]


def idle_and_trickle(count: int) -> dict[str, Any]:
    """W idle workers at the default intervals: their statements/s, then per enqueue."""
    reset()
    connection.close()
    procs = start_workers(count)
    try:
        time.sleep(12.0)  # start-up, and PostgreSQL's statistics lag (see steady_state)
        x0, t0 = xact_commit(), time.monotonic()
        time.sleep(ARGS.window)
        x1, t1 = xact_commit(), time.monotonic()
        idle_rate = (x1 - x0) / (t1 - t0)
        # The trickle: single enqueues, each in its own transaction, at a steady rate.
        enqueues = int(ARGS.trickle_rate * ARGS.trickle_seconds)
        x2, t2 = xact_commit(), time.monotonic()
        for i in range(enqueues):
            jobs.peers_noop.enqueue()
            pause = t2 + (i + 1) / ARGS.trickle_rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        connection.close()
        time.sleep(2.0)  # let the last settles land and the backends report
        x3, t3 = xact_commit(), time.monotonic()
    finally:
        for proc in procs:
            common.stop_worker(proc)
    fleet_statements = (x3 - x2) - enqueues - idle_rate * (t3 - t2)
    return {
        "idle_statements_per_s": idle_rate,
        "trickle_enqueues": enqueues,
        "statements_per_enqueue": fleet_statements / enqueues,
    }


def main() -> None:
    args = ARGS
    call_command("migrate", verbosity=0)
    result: dict[str, Any] = {"jobs": args.jobs, "threads": args.threads,
                              "heartbeat_interval": args.heartbeat_interval, "fleets": {}}
    for count in [int(w) for w in args.workers.split(",")]:
        drains = []
        for r in range(args.repeat):
            drains.append(drain(count))
            log(f"fleet of {count}: drain run {r + 1}/{args.repeat}: {drains[-1]}")
        steady = steady_state(count)
        log(f"fleet of {count}: steady state {steady}")
        idle = idle_and_trickle(count)
        log(f"fleet of {count}: idle {idle}")
        result["fleets"][count] = {
            "drain": common.median([d["jobs_per_s"] for d in drains]),
            "drain_runs": [d["jobs_per_s"] for d in drains],
            "seconds": common.median([d["seconds"] for d in drains]),
            "peak_connections": max(d["peak_connections"] for d in drains),
            "workers_that_ran_jobs": min(d["workers_that_ran_jobs"] for d in drains),
            **steady,
            **idle,
        }
    connection.close()
    if not args.keep_database:
        common.drop_database(args.db)
    print(render(result))
    common.emit(result)


def render(result: dict[str, Any]) -> str:
    out = [
        f"Fleet: {result['jobs']:,} no-op jobs, each worker `runjobworker --threads "
        f"{result['threads']}` (median of {ARGS.repeat} drains); steady state with every thread "
        f"holding a sleeping job, --heartbeat-interval {result['heartbeat_interval']:g}.",
        "",
        "| worker processes | drain jobs/s | drain s | workers that ran jobs | peak sessions "
        "(drain) | sessions (steady) | statements/s (steady) | per worker per beat | "
        "worker-row updates/s | heartbeated rows/s | statements/s at the default 10 s | "
        "idle statements/s (defaults) | fleet statements per enqueue (idle fleet) |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for count, f in result["fleets"].items():
        out.append(
            f"| {count} | {f['drain']:,.0f} | {f['seconds']:.1f} | {f['workers_that_ran_jobs']} "
            f"| {f['peak_connections']} | {f['idle_sessions']} | {f['statements_per_s']:.1f} | "
            f"{f['statements_per_worker_beat']:.2f} | {f['worker_touch_per_s']:.1f} | "
            f"{f['heartbeat_rows_per_s']:.0f} | {f['statements_per_s_at_10s']:.2f} | "
            f"{f['idle_statements_per_s']:.1f} | {f['statements_per_enqueue']:.1f} |")
    return "\n".join(out)


if __name__ == "__main__":
    common.exit_on_sigterm()
    main()
