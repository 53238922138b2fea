"""The database's work per drained job, ours and PgQueuer's, from the server's own counters.

    python -m benchmarks.db_work [--jobs 20000] [--rounds 3] [--threads 128]

The peer benchmark's database CPU is the machine's busy CPU less the worker's, so it counts
whatever else the machine ran meanwhile. Here the database's side of a drain is read from what
the server counts instead: WAL records and bytes (``pg_stat_wal``, the whole cluster: run it on a
quiet server), shared buffers hit or read, rows updated, inserted and deleted, and transactions
committed (``pg_stat_database``, the drained database alone), and the CPU of the backends that
served the worker (``/proc/<pid>/schedstat``, each found in ``pg_stat_activity`` while the drain
runs; Linux only). Every figure is per drained job, from just before the worker starts to its
exit, so the enqueue before it is not counted. Each round drains ours and PgQueuer on databases
of their own, the order alternating from round to round; the table shows medians.

No-op jobs, one worker process each: ours ``runjobworker --burst --threads T`` on the peer
benchmark's settings (``prepare_threshold`` 5), PgQueuer at the peer benchmark's setting.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.peers import common

#: Per drained job, in the order printed.
FIGURES = ("wal_records", "wal_bytes", "buffers", "rows_updated", "rows_inserted",
           "rows_deleted", "commits", "backend_cpu_us", "jobs_per_s")
#: Seconds for exited backends to have flushed their counters (PostgreSQL reports a backend's
#: statistics when it is idle, at most once a second, and when it exits).
FLUSH = 1.5


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.db_work")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=128, help="ours: runjobworker --threads")
    parser.add_argument("--db-prefix", default="ultjobs_peers_db_work")
    return parser.parse_args()


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None:
    os.environ.update(BENCH_PEERS_DB=f"{ARGS.db_prefix}_ours", BENCH_PEERS_SYSTEM="ours",
                      BENCH_PEERS_CAPPED="0", BENCH_PEERS_PREPARE="5")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.peers.settings")

import psycopg  # noqa: E402


def counters(db: str) -> dict[str, float]:
    """The server's counters that grow with the database's work, as they stand now."""
    with psycopg.connect(common.dsn(db), autocommit=True) as conn:
        wal_records, wal_bytes = conn.execute(
            "SELECT wal_records, wal_bytes FROM pg_stat_wal").fetchone()
        row = conn.execute(
            "SELECT blks_hit + blks_read, tup_updated, tup_inserted, tup_deleted, xact_commit "
            "FROM pg_stat_database WHERE datname = current_database()").fetchone()
    return dict(zip(("wal_records", "wal_bytes", "buffers", "rows_updated", "rows_inserted",
                     "rows_deleted", "commits"), (wal_records, wal_bytes, *row), strict=True))


def backend_seconds(pid: int) -> float | None:
    """Seconds backend ``pid`` has spent on a CPU (nanoseconds exact), None once it is gone or
    when the pid is not a PostgreSQL process of this machine (a server elsewhere)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            if not f.read().startswith("postgres"):
                return None
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except OSError:
        return None


def drain_measured(db: str, cmd: list[str], env: dict[str, str], jobs: int) -> dict[str, float]:
    """Run the worker ``cmd`` until it exits; the database's work per job meanwhile."""
    time.sleep(FLUSH)  # the enqueue's counters are in before the first reading
    before = counters(db)
    seconds: dict[int, float] = {}
    polls = 0
    started = time.monotonic()
    with psycopg.connect(common.dsn(db), autocommit=True) as conn:
        proc = subprocess.Popen(cmd, cwd=common.REPO, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        own = conn.info.backend_pid
        try:
            while proc.poll() is None:
                polls += 1
                # The worker's connections only: not this one, nor an autovacuum worker.
                for (pid,) in conn.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                        "AND backend_type = 'client backend' AND pid <> %s", [own]).fetchall():
                    spent = backend_seconds(pid)
                    if spent is not None:
                        seconds[pid] = spent  # since the backend started: all of it the drain's
                time.sleep(0.01)
        except BaseException:
            proc.kill()
            raise
    took = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} exited {proc.returncode}")
    if not seconds:
        raise RuntimeError("no backend of the worker was found in /proc: the server must run on "
                           "this machine")
    time.sleep(FLUSH)
    after = counters(db)
    figures = {key: float(after[key] - before[key]) / jobs for key in before}
    # The polls above and the first reading's two statements are transactions of this
    # database's too, each counted as a commit: not the drain's.
    figures["commits"] -= (polls + 2) / jobs
    figures["backend_cpu_us"] = sum(seconds.values()) / jobs * 1e6
    figures["jobs_per_s"] = jobs / took  # process start-up and exit included: a rough figure
    return figures


def ours_round(db: str, jobs: int, threads: int) -> dict[str, float]:
    from django.db import connection

    from benchmarks.peers import ours

    ours.ARGS = argparse.Namespace(db=db, workload="noop")
    ours.reset()
    ours.bulk_enqueue(jobs)
    ours.analyze()
    connection.close()
    return drain_measured(db, ours.worker_cmd(threads, burst=True), ours.worker_env(False), jobs)


def pgqueuer_round(db: str, jobs: int, threads: int) -> dict[str, float]:
    from benchmarks.peers import peer_pgqueuer

    asyncio.run(peer_pgqueuer.reset(db))
    asyncio.run(peer_pgqueuer.bulk_enqueue(db, jobs))
    common.execute(db, "ANALYZE pgqueuer, pgqueuer_log")
    args = peer_pgqueuer.parse_args(["drain", "--db", db, "--jobs", str(jobs)])
    return drain_measured(db, peer_pgqueuer.worker_cmd(args, drain=True), common.child_env(),
                          jobs)


def main() -> None:
    assert ARGS is not None
    import django

    django.setup()
    from django.core.management import call_command

    from benchmarks.peers import peer_pgqueuer

    systems: dict[str, tuple[str, Callable[[str, int, int], dict[str, float]]]] = {
        "django_ultjobs": (f"{ARGS.db_prefix}_ours", ours_round),
        "PgQueuer": (f"{ARGS.db_prefix}_pgqueuer", pgqueuer_round),
    }
    common.create_database(systems["django_ultjobs"][0])
    call_command("migrate", run_syncdb=True, verbosity=0)
    common.create_database(systems["PgQueuer"][0])
    asyncio.run(peer_pgqueuer.install(systems["PgQueuer"][0]))
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in systems}
    try:
        for n in range(ARGS.rounds):
            order = list(systems) if n % 2 == 0 else list(reversed(systems))
            for name in order:
                db, drain = systems[name]
                runs[name].append(drain(db, ARGS.jobs, ARGS.threads))
                common.log(f"round {n + 1}, {name}: " + ", ".join(
                    f"{key} {runs[name][-1][key]:,.2f}" for key in FIGURES))
    finally:
        from django.db import connection

        connection.close()
        for db, _ in systems.values():
            common.drop_database(db)
    print(render(runs))


def render(runs: dict[str, list[dict[str, Any]]]) -> str:
    """Medians of the rounds, one row per system, and each round's backend CPU."""
    lines = ["| per drained job | " + " | ".join(runs) + " |",
             "| --- |" + " --: |" * len(runs)]
    for key in FIGURES:
        lines.append(f"| {key} | " + " | ".join(
            f"{statistics.median(run[key] for run in system_runs):,.2f}"
            for system_runs in runs.values()) + " |")
    for name, system_runs in runs.items():
        lines.append(f"\n{name}, backend CPU µs a job in each round: " + ", ".join(
            f"{run['backend_cpu_us']:.1f}" for run in system_runs))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
