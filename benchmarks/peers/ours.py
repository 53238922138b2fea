"""django_ultjobs in the peer benchmark: one ``runjobworker`` process, as a user runs it.

    python -m benchmarks.peers.ours PHASE --db ultjobs_peers_ours [--jobs N] [--threads T]

One phase per call, each printing one ``RESULT`` line (the runner interleaves the systems'
drains, so drift on a shared machine falls on all of them alike):

- ``setup`` creates the database and migrates; ``teardown`` drops it;
- ``drain``: bulk enqueue N no-op jobs, drain them with one ``runjobworker --burst --threads T``
  (``--workload`` for the I/O-bound and Django-shaped jobs, ``--default-flags`` for a worker
  started with no options, ``--async-concurrency`` for async bodies on the worker's event loop);
- ``single``: median ``enqueue()`` with its own commit and inside an open transaction;
- ``pickup``: idle pickup p50/p99 with one continuous ``runjobworker --threads T``;
- ``slots``: one drain of N jobs without a cap, then one of N jobs declaring ``concurrency=64``;
- ``history``: the claim statement and the drain with no finished rows, then with a million.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.peers import common
from benchmarks.peers.common import log

PHASES = ("setup", "drain", "single", "pickup", "slots", "history", "teardown", "sqlite-pickup")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.ours")
    parser.add_argument("phase", choices=PHASES)
    parser.add_argument("--db", default="ultjobs_peers_ours")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--workload", choices=common.OURS_WORKLOADS, default="noop",
                        help="drain: what each job does")
    parser.add_argument("--default-flags", action="store_true",
                        help="drain: start runjobworker with no options (ignore --threads)")
    parser.add_argument("--async-concurrency", type=int, default=None,
                        help="drain: runjobworker --async-concurrency N (async bodies)")
    parser.add_argument("--pool", choices=("threads", "process"), default="threads",
                        help="drain: runjobworker --pool")
    parser.add_argument("--processes", type=int, default=None,
                        help="drain: runjobworker --processes N (with --pool process)")
    parser.add_argument("--samples", type=int, default=200, help="pickup samples")
    parser.add_argument("--repeat", type=int, default=3, help="history: drains per condition")
    parser.add_argument("--rows", type=int, default=1_000_000,
                        help="history: finished rows added to the table")
    parser.add_argument("--poll-interval", type=float, default=1.0,
                        help="pickup: the worker's --poll-interval (what SQLite's pickup is)")
    parser.add_argument("--prepare-threshold", default="off",
                        help="Django's OPTIONS['prepare_threshold'] for ours and its workers: "
                             "'off' (Django's default) or runs before a statement is prepared")
    parser.add_argument("--analyze", action="store_true",
                        help="drain, slots: ANALYZE the tables after the enqueue, as autovacuum "
                             "would have by then in production")
    return parser.parse_args(argv)


ARGS = parse_args(sys.argv[1:]) if __name__ == "__main__" else None
if ARGS is not None:
    # Before Django starts: the settings read the database name, and the capped job is
    # registered in this (enqueuing) process so it can be enqueued; workers get their own env.
    os.environ["BENCH_PEERS_DB"] = ARGS.db
    os.environ["BENCH_PEERS_SYSTEM"] = "ours"
    os.environ["BENCH_PEERS_CAPPED"] = "1"
    os.environ["BENCH_PEERS_PREPARE"] = ARGS.prepare_threshold  # the workers inherit it
    os.environ["BENCH_PEERS_WORKLOAD"] = ARGS.workload  # and this (settings read it)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.peers.settings")
    if ARGS.phase == "sqlite-pickup":
        # SQLite has no LISTEN: an idle worker finds a new job at its next poll.
        os.environ["BENCH_PEERS_ENGINE"] = "sqlite"
    elif ARGS.phase == "setup":
        common.create_database(ARGS.db)

import django  # noqa: E402

django.setup()

from django.apps import apps  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from benchmarks.peers import jobs  # noqa: E402
from benchmarks.peers.models import PeersRecord  # noqa: E402
from django_ultjobs.models import Job  # noqa: E402


def job_tables() -> list[str]:
    return [m._meta.db_table for m in apps.get_app_config("django_ultjobs").get_models()
            if m._meta.managed and not m._meta.proxy]


def reset() -> None:
    """Empty every job table (a fresh relfilenode: no dead rows, no bloat from earlier runs)."""
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            for table in job_tables():
                cur.execute(f"DELETE FROM {table}")
            return
        tables = [*job_tables(), PeersRecord._meta.db_table]
        cur.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")


def analyze() -> None:
    with connection.cursor() as cur:
        cur.execute(f"ANALYZE {', '.join(job_tables())}")


WORKLOAD_JOBS = {"noop": "peers_noop", "io-sync": "peers_io_sync",
                 "io-async": "peers_io_async", "django": "peers_django"}


def bulk_enqueue(count: int, spec: Any = None, workload: str = "noop") -> float:
    if workload == "mix":
        return _bulk_enqueue_mix(count)
    spec = spec or getattr(jobs, WORKLOAD_JOBS[workload])
    started = time.perf_counter()
    with transaction.atomic():
        for start in range(0, count, common.BULK_CHUNK):
            n = min(common.BULK_CHUNK, count - start)
            # The Django-shaped job takes its sequence number; the others take nothing.
            spec.bulk_enqueue([(start + i,) for i in range(n)] if workload == "django"
                              else [()] * n)
    return count / (time.perf_counter() - started)


def _bulk_enqueue_mix(count: int) -> float:
    """The capped mix: every ``MIX_EVERY``-th job the capped kind, the rest short ones."""
    from django_ultjobs import bulk_enqueue as enqueue_calls

    short, long = jobs.peers_mix_short.call(), jobs.peers_mix_long.call()
    started = time.perf_counter()
    with transaction.atomic():
        for start in range(0, count, common.BULK_CHUNK):
            enqueue_calls([long if i % common.MIX_EVERY == 0 else short
                           for i in range(start, min(count, start + common.BULK_CHUNK))])
    return count / (time.perf_counter() - started)


def worker_cmd(threads: int | None, burst: bool, poll_interval: float | None = None,
               async_concurrency: int | None = None) -> list[str]:
    """``runjobworker`` as a user starts it; ``threads=None`` leaves ``--threads`` at its
    default."""
    cmd = [sys.executable, "-m", "django", "runjobworker"]
    if ARGS is not None and ARGS.pool == "process":
        # Children take the bodies; --threads would mean nothing.
        cmd += ["--pool", "process", *(["--processes", str(ARGS.processes)]
                                       if ARGS.processes else [])]
    elif threads is not None:
        cmd += ["--threads", str(threads)]
    if async_concurrency is not None:
        cmd += ["--async-concurrency", str(async_concurrency)]
    if poll_interval is not None:
        cmd += ["--poll-interval", str(poll_interval)]
    return cmd + (["--burst"] if burst else [])


def async_lane_available() -> bool:
    """Whether this ``runjobworker`` runs async bodies on an event loop of its own: its
    ``--help`` names ``--async-concurrency``."""
    proc = subprocess.run([sys.executable, "-m", "django", "help", "runjobworker"],
                          cwd=common.REPO, env=worker_env(False), capture_output=True, text=True)
    return "--async-concurrency" in proc.stdout


def worker_env(capped: bool) -> dict[str, str]:
    return common.child_env(BENCH_PEERS_DB=ARGS.db, BENCH_PEERS_SYSTEM="ours",
                            BENCH_PEERS_CAPPED="1" if capped else "0",
                            BENCH_PEERS_WORKLOAD=ARGS.workload,
                            BENCH_PEERS_ENGINE=os.environ.get("BENCH_PEERS_ENGINE", "postgresql"))


def max_job_id() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT COALESCE(max(id), 0) FROM django_ultjobs_job")
        return cur.fetchone()[0]


def drain(threads: int | None, expected: int, *, capped: bool = False, since_id: int = 0,
          async_concurrency: int | None = None) -> dict[str, float]:
    """One ``runjobworker --burst`` process drains the queue; jobs/s from the database's own
    timestamps (first claim to last settle), so process start-up and exit are not counted."""
    proc = subprocess.Popen(worker_cmd(threads, burst=True, async_concurrency=async_concurrency),
                            cwd=common.REPO, env=worker_env(capped), stdout=sys.stderr)
    with common.CpuMeter(proc.pid) as meter:
        code = common.wait_or_kill(proc, max(300.0, expected / 100), "runjobworker --burst")
    if code != 0:
        raise RuntimeError(f"runjobworker --burst exited {code}")
    with connection.cursor() as cur:
        cur.execute("SELECT count(*), extract(epoch FROM min(claimed_at)), "
                    "extract(epoch FROM max(finished_at)) "
                    "FROM django_ultjobs_job WHERE status = 'succeeded' AND id > %s", [since_id])
        done, start, end = cur.fetchone()
    if done != expected:
        raise RuntimeError(f"drain left {expected - done} of {expected} jobs unfinished")
    return common.drain_figures(expected, float(start), float(end), meter)


def single_enqueues_both_ways(threshold: int) -> dict[str, float]:
    blocks: dict[str, list[float]] = {}
    for prefix in ("", "unprepared_", "unprepared_", ""):
        connection.close()
        options = connection.settings_dict.setdefault("OPTIONS", {})
        if prefix:
            options.pop("prepare_threshold", None)
        else:
            options["prepare_threshold"] = threshold
        for key, in_transaction in (("single_commit_ms", False), ("single_txn_ms", True)):
            blocks.setdefault(prefix + key, []).append(single_enqueue_ms(in_transaction))
    return {key: sum(values) / len(values) for key, values in blocks.items()}


def single_enqueue_ms(in_transaction: bool) -> float:
    if not in_transaction:
        return common.time_single_enqueues(jobs.peers_noop.enqueue)
    with transaction.atomic():
        return common.time_single_enqueues(jobs.peers_noop.enqueue)


def pickup(threads: int, samples: int, poll_interval: float | None = None) -> dict[str, Any]:
    reset()
    probe = common.PickupProbe()
    proc = subprocess.Popen(worker_cmd(threads, burst=False, poll_interval=poll_interval),
                            cwd=common.REPO, env=worker_env(False), stdout=sys.stderr)

    def enqueue(seq: int) -> float:
        with transaction.atomic():
            jobs.peers_ping.enqueue(seq, probe.port)
        return time.monotonic()

    # Against a polling worker the gap spans a whole poll, so each enqueue meets a random phase.
    gap = (0.02, 0.07) if poll_interval is None else (0.02, 0.02 + poll_interval)
    try:
        return common.measure_pickup(enqueue, probe, samples, gap=gap)
    finally:
        common.stop_worker(proc)
        probe.close()


def claim_ms(limit: int, reps: int = 50) -> dict[str, float] | None:
    """Median ms of one claim statement of ``limit`` rows, each rolled back (rows stay queued).

    Uses the store's claim directly; returns None if its signature has changed."""
    from django_ultjobs.store import get_store

    store = get_store()
    timings = []
    claimed = 0
    try:
        for _ in range(reps):
            with transaction.atomic():
                started = time.perf_counter()
                got = store.claim(worker_id="bench-claim", queues=("default",), limit=limit,
                                  visibility_timeout=30.0, caps={})
                timings.append((time.perf_counter() - started) * 1000.0)
                claimed = len(got)
                transaction.set_rollback(True)
    except TypeError as exc:
        log(f"claim timing skipped: store.claim changed ({exc})")
        return None
    return {"ms": common.median(timings), "rows": claimed}


def insert_history(rows: int) -> float:
    """Add ``rows`` finished jobs in one statement (finished a day ago, a millisecond apart)."""
    overrides = {
        "name": "'peers_noop'", "queue": "'default'", "status": "'succeeded'",
        "attempt": "1", "max_attempts": "1", "worker_id": "'history'",
        "claimed_at": "ts", "finished_at": "ts", "visible_at": "ts", "created_at": "ts",
        "updated_at": "ts", "result": "'null'::jsonb",
    }
    columns, values, params = [], [], []
    for field in Job._meta.concrete_fields:
        if field.primary_key:
            continue
        if field.name in overrides:
            columns.append(field.column)
            values.append(overrides[field.name])
        elif field.has_db_default() or field.null:
            continue
        elif field.has_default():
            default = field.get_default()
            columns.append(field.column)
            values.append("%s")
            params.append(field.get_db_prep_save(default, connection))
        else:
            raise RuntimeError(f"history: no value for NOT NULL column {field.column}")
    sql = (f"INSERT INTO django_ultjobs_job ({', '.join(columns)}) "
           f"SELECT {', '.join(values)} FROM generate_series(1, %s) AS g, "
           "LATERAL (SELECT now() - interval '1 day' + g * interval '1 millisecond') AS t(ts)")
    started = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute(sql, [*params, rows])
        cur.execute("ANALYZE django_ultjobs_job")
    return time.perf_counter() - started


def history_run(threads: int) -> dict[str, float]:
    since_id = max_job_id()
    bulk_enqueue(ARGS.jobs)
    analyze()  # always here: both conditions are compared with statistics in place
    claim = claim_ms(threads)
    result = drain(threads, ARGS.jobs, since_id=since_id)
    if claim is not None:
        result["claim_ms"] = claim["ms"]
        result["claim_rows"] = claim["rows"]
    return result


def main() -> None:
    args = ARGS
    threads = args.threads
    result: dict[str, Any] = {}
    if args.phase == "setup":
        # --run-syncdb: the Django-shaped job's table (the benchmark app has no migrations).
        call_command("migrate", run_syncdb=True, verbosity=0)
        result = {"version": _version(), "async_lane": async_lane_available()}
    elif args.phase == "drain":
        reset()
        result["bulk"] = bulk_enqueue(args.jobs, workload=args.workload)
        if args.analyze:
            analyze()
        result.update(drain(None if args.default_flags else threads, args.jobs,
                            async_concurrency=args.async_concurrency))
    elif args.phase == "single":
        reset()
        if args.prepare_threshold == "off":
            result["single_commit_ms"] = single_enqueue_ms(in_transaction=False)
            result["single_txn_ms"] = single_enqueue_ms(in_transaction=True)
        else:
            # Also on Django's default connections, which prepare nothing: two blocks each,
            # alternating, so neither setting always runs on the later (warmer, or busier) half.
            result.update(single_enqueues_both_ways(int(args.prepare_threshold)))
    elif args.phase == "pickup":
        result = pickup(threads, args.samples)
    elif args.phase == "slots":
        # One uncapped and one capped drain back to back, so drift on a shared machine hits both.
        for key, spec, capped in (("uncapped", jobs.peers_noop, False),
                                  ("capped", jobs.peers_capped_noop, True)):
            reset()
            bulk_enqueue(args.jobs, spec)
            if args.analyze:
                analyze()
            result[key] = drain(threads, args.jobs, capped=capped)["jobs_per_s"]
    elif args.phase == "history":
        result = history(threads, args.rows, args.repeat)
    elif args.phase == "teardown":
        connection.close()
        common.drop_database(args.db)
    elif args.phase == "sqlite-pickup":
        connection.close()
        path = settings.DATABASES["default"]["NAME"]
        for suffix in ("", "-wal", "-shm"):
            Path(path + suffix).unlink(missing_ok=True)
        call_command("migrate", verbosity=0)
        try:
            result = pickup(threads, args.samples, poll_interval=args.poll_interval)
        finally:
            connection.close()
            for suffix in ("", "-wal", "-shm"):
                Path(path + suffix).unlink(missing_ok=True)
        result["poll_interval"] = args.poll_interval
        print(f"SQLite idle pickup, --threads {threads} --poll-interval {args.poll_interval:g}: "
              f"p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms "
              f"({result['samples']} samples)", file=sys.stderr)
    connection.close()
    common.emit(result)


def history(threads: int, rows: int, repeat: int) -> dict[str, Any]:
    """The claim and the drain with no finished rows, then with ``rows`` of them."""
    baseline, with_history = [], []
    for r in range(repeat):
        reset()
        baseline.append(history_run(threads))
        log(f"ours, no finished rows, run {r + 1}/{repeat}: {_short(baseline[-1])}")
    reset()
    seconds = insert_history(rows)
    log(f"ours: {rows:,} finished rows inserted in {seconds:.1f}s")
    for r in range(repeat):
        with_history.append(history_run(threads))
        log(f"ours, {rows:,} finished rows, run {r + 1}/{repeat}: {_short(with_history[-1])}")
    result: dict[str, Any] = {"rows": rows, "jobs": ARGS.jobs}
    for name, runs in (("empty", baseline), ("history", with_history)):
        result[f"{name}_drain"] = common.median([r["jobs_per_s"] for r in runs])
        if all("claim_ms" in r for r in runs):
            result[f"{name}_claim_ms"] = common.median([r["claim_ms"] for r in runs])
            result["claim_rows"] = runs[-1]["claim_rows"]
    return result


def _short(run: dict[str, float]) -> str:
    claim = f", claim {run['claim_ms']:.2f} ms" if "claim_ms" in run else ""
    return f"drain {run['jobs_per_s']:,.0f}/s{claim}"


def _version() -> str:
    from importlib.metadata import version

    return version("django-ultjobs")


if __name__ == "__main__":
    common.exit_on_sigterm()
    main()
