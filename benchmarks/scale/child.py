"""One phase of ``python -m benchmarks.scale`` in a process of its own, printing one ``RESULT``.

    python -m benchmarks.scale.child PHASE --db ultjobs_peers_scale_... [options]

Run by the orchestrator (``benchmarks.scale``) with ``DJANGO_SETTINGS_MODULE`` set to
``benchmarks.scale.settings``; each phase leaves the tables as it found them except the fills.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PHASES = ("setup", "fill-history", "fill-queued", "clear-live", "top-up", "drain", "pickup",
          "single", "read-paths", "prune-cycle", "sizes", "sqlite")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale.child")
    p.add_argument("phase", choices=PHASES)
    p.add_argument("--db", required=True)
    p.add_argument("--rows", type=int, default=0, help="fills: rows to add")
    p.add_argument("--days", type=float, default=30.0,
                   help="fills of finished jobs: the span they finished over (the last "
                        "DAYS days)")
    p.add_argument("--analyze", action="store_true", help="fills: VACUUM ANALYZE afterwards")
    p.add_argument("--workload", default="noop", help="drain: noop or io-sync")
    p.add_argument("--jobs", type=int, default=20_000, help="drain: jobs drained")
    p.add_argument("--threads", type=int, default=32, help="drain, pickup: --threads")
    p.add_argument("--samples", type=int, default=100, help="pickup: samples")
    p.add_argument("--repeat", type=int, default=5, help="read-paths: runs per page")
    p.add_argument("--per-second", action="store_true",
                   help="drain: also the jobs finished in each second (epoch seconds)")
    p.add_argument("--no-vacuum", action="store_true",
                   help="drain: leave the drained rows' dead versions (no VACUUM after)")
    p.add_argument("--explain", action="store_true", help="read-paths: explain the slowest")
    p.add_argument("--paths", default="admin,cli,stats", help="read-paths: which")
    return p.parse_args(argv)


ARGS = parse_args(sys.argv[1:]) if __name__ == "__main__" else None
if ARGS is not None:
    os.environ["BENCH_PEERS_DB"] = ARGS.db
    os.environ["BENCH_PEERS_SYSTEM"] = "ours"
    os.environ["BENCH_PEERS_WORKLOAD"] = ARGS.workload
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.scale.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402

from benchmarks.peers import common  # noqa: E402
from benchmarks.scale import fill, locks, pages  # noqa: E402

#: The job tables a phase cleans up after itself, children first.
JOB_TABLES = ("django_ultjobs_jobattempt", "django_ultjobs_jobstep", "django_ultjobs_job")


def vacuum(*tables: str, analyze: bool = False) -> float:
    """VACUUM (what autovacuum would have done; this server runs with it off); seconds."""
    started = time.perf_counter()
    options = "INDEX_CLEANUP ON" + (", ANALYZE" if analyze else "")
    with connection.cursor() as cur:
        cur.execute(f"VACUUM ({options}) {', '.join(tables)}")
    return time.perf_counter() - started


def max_job_id() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT COALESCE(max(id), 0) FROM django_ultjobs_job")
        return cur.fetchone()[0]


def clear_since(since: int) -> None:
    """Delete the jobs a phase added (ids above ``since``), their rows elsewhere, and the worker
    rows its worker processes wrote."""
    with connection.cursor() as cur:
        cur.execute("DELETE FROM django_ultjobs_jobattempt WHERE job_id > %s", [since])
        cur.execute("DELETE FROM django_ultjobs_jobstep WHERE job_id > %s", [since])
        cur.execute("DELETE FROM django_ultjobs_job WHERE id > %s", [since])
        cur.execute("DELETE FROM django_ultjobs_worker WHERE id NOT LIKE 'web-%%'")
        cur.execute("DELETE FROM django_ultjobs_slot WHERE holder NOT LIKE 'web-%%'")


def ours_module() -> Any:
    """The peer benchmark's own drain code, pointed at this database."""
    from benchmarks.peers import ours

    ours.ARGS = ours.parse_args(["drain", "--db", ARGS.db, "--workload", ARGS.workload,
                                 "--threads", str(ARGS.threads)])
    return ours


# -- phases ----------------------------------------------------------------------------------------


def setup() -> dict[str, Any]:
    # --run-syncdb: the peer benchmark's Django-shaped job's table (its app has no migrations).
    call_command("migrate", run_syncdb=True, verbosity=0)
    return {"pg_version": connection.pg_version}


def fill_history() -> dict[str, Any]:
    started = time.perf_counter()
    jobs, attempts = fill.fill_history(ARGS.rows, ARGS.days)
    result = {"jobs": jobs, "attempts": attempts, "seconds": time.perf_counter() - started}
    if ARGS.analyze:
        result["vacuum_s"] = vacuum(*JOB_TABLES, analyze=True)
    return result


def fill_queued() -> dict[str, Any]:
    started = time.perf_counter()
    jobs = fill.fill_queued(ARGS.rows)
    result = {"jobs": jobs, "seconds": time.perf_counter() - started}
    if ARGS.analyze:
        result["vacuum_s"] = vacuum(*JOB_TABLES, "django_ultjobs_worker", analyze=True)
    return result


def clear_live() -> dict[str, Any]:
    """Delete every live job (the backlog a fill added) and vacuum."""
    with connection.cursor() as cur:
        cur.execute("DELETE FROM django_ultjobs_job "
                    "WHERE status IN ('queued', 'running', 'waiting')")
        deleted = cur.rowcount
    return {"deleted": deleted, "vacuum_s": vacuum(*JOB_TABLES, analyze=True)}


def finished_jobs() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM django_ultjobs_job "
                    "WHERE status IN ('succeeded', 'failed', 'cancelled')")
        return cur.fetchone()[0]


def top_up() -> dict[str, Any]:
    """Add finished jobs until there are ``--rows`` (a reused HIST after a prune), finished
    since the newest one, as workers add them; VACUUM ANALYZE."""
    started = time.perf_counter()
    missing = ARGS.rows - finished_jobs()
    jobs = attempts = 0
    if missing > 0:
        jobs, attempts = fill.fill_history(missing, fill.days_since_last_finish())
    return {"jobs": jobs, "attempts": attempts, "seconds": time.perf_counter() - started,
            "vacuum_s": vacuum(*JOB_TABLES, analyze=True)}


def drain() -> dict[str, Any]:
    """Bulk enqueue, ANALYZE, one ``runjobworker --burst`` drains them (the peers' drain), then
    the drained rows are deleted and the tables vacuumed, so the next drain meets the same
    tables."""
    ours = ours_module()
    since = ours.max_job_id()
    ours.bulk_enqueue(ARGS.jobs, workload=ARGS.workload)
    ours.analyze()
    # The worker's backends are named (this process's connection is open already), so the
    # lock sampler tells them from the prune's.
    os.environ["PGAPPNAME"] = locks.WORKER_APP
    started = time.time()
    result = ours.drain(ARGS.threads, ARGS.jobs, since_id=since)
    result["wall_start"], result["wall_end"] = started, time.time()
    if ARGS.per_second:
        with connection.cursor() as cur:
            cur.execute("SELECT floor(extract(epoch FROM finished_at))::bigint, count(*) "
                        "FROM django_ultjobs_job WHERE id > %s AND status = 'succeeded' "
                        "GROUP BY 1", [since])
            result["per_second"] = {str(second): n for second, n in cur.fetchall()}
    clear_since(since)
    if not ARGS.no_vacuum:
        result["vacuum_s"] = vacuum(*JOB_TABLES)
    return result


def pickup() -> dict[str, Any]:
    """Idle pickup with one continuous worker, on the tables as they are (no reset)."""
    from benchmarks.peers import jobs

    ours = ours_module()
    since = ours.max_job_id()
    probe = common.PickupProbe()
    proc = subprocess.Popen(ours.worker_cmd(ARGS.threads, burst=False), cwd=common.REPO,
                            env=ours.worker_env(False), stdout=sys.stderr)

    def enqueue(seq: int) -> float:
        with transaction.atomic():
            jobs.peers_ping.enqueue(seq, probe.port)
        return time.monotonic()

    try:
        result = common.measure_pickup(enqueue, probe, ARGS.samples)
    finally:
        common.stop_worker(proc)
        probe.close()
    clear_since(since)
    vacuum(*JOB_TABLES)
    return result


def single() -> dict[str, Any]:
    """Median ``enqueue()`` with its own commit, and inside an open transaction."""
    ours = ours_module()
    since = ours.max_job_id()
    result = {"single_commit_ms": ours.single_enqueue_ms(in_transaction=False),
              "single_txn_ms": ours.single_enqueue_ms(in_transaction=True)}
    clear_since(since)
    vacuum(*JOB_TABLES)
    return result


def read_paths() -> dict[str, Any]:
    """The admin pages, the CLI and the stats view, timed (and explained)."""
    setup_test_environment()
    pages.register_jobs()
    wanted = ARGS.paths.split(",")
    timed: list[pages.Timed] = []
    if "admin" in wanted:
        timed += pages.time_admin(ARGS.repeat, ARGS.explain)
    if "cli" in wanted:
        timed += pages.time_cli(ARGS.repeat, ARGS.explain)
    if "stats" in wanted:
        timed += pages.time_stats(ARGS.repeat, ARGS.explain)
    return {"paths": pages.dump(timed), "live": live_counts()}


def live_counts() -> dict[str, int]:
    with connection.cursor() as cur:
        cur.execute("SELECT status, count(*) FROM django_ultjobs_job "
                    "WHERE status IN ('queued', 'running', 'waiting') GROUP BY status")
        return dict(cur.fetchall())


def prune_cycle() -> dict[str, Any]:
    """One fill-and-prune cycle: ``--rows`` finished jobs added, finished since the newest
    finished one (the finish-time indexes' right edge, as workers add them), ``prunejobs`` of
    the ``--rows`` oldest run in this process with its statements captured, VACUUM; the table
    and index sizes after."""
    started = time.perf_counter()
    jobs, attempts = fill.fill_history(ARGS.rows, fill.days_since_last_finish())
    filled = time.perf_counter() - started
    prune = run_prune(fill.retention_days(ARGS.rows))
    result = {"filled": jobs, "filled_attempts": attempts, "fill_s": filled, **prune,
              "vacuum_s": vacuum(*JOB_TABLES), "sizes": sizes()}
    return result


def run_prune(days: float) -> dict[str, Any]:
    """``prunejobs --days DAYS`` with every statement captured, summed per kind of statement;
    the batch's id select timed one by one (does it grow as the prune goes?)."""
    out = io.StringIO()
    with connection.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()::text")
        lsn = cur.fetchone()[0]
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        call_command("prunejobs", "--days", str(days), stdout=out, stderr=out)
        seconds = time.perf_counter() - started
    with connection.cursor() as cur:
        cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [lsn])
        wal = int(cur.fetchone()[0])
    kinds: dict[str, list[float]] = {}
    for q in captured.captured_queries:
        kinds.setdefault(statement_kind(q["sql"]), []).append(float(q["time"]) * 1000)
    batches = kinds.get(BATCH_SELECT, [])
    return {"prune_s": seconds, "prune_output": out.getvalue().strip(), "wal_bytes": wal,
            "statements": {k: {"n": len(v), "total_ms": sum(v), "first_ms": v[0],
                               "last_ms": v[-1], "max_ms": max(v)} for k, v in kinds.items()},
            "batch_select_ms": [round(ms, 1) for ms in batches]}


#: The statement that picks each batch's ids.
BATCH_SELECT = "SELECT ids of a batch"
_TABLE = re.compile(r'(?:FROM|UPDATE|INTO) "(\w+)"')


def statement_kind(sql: str) -> str:
    """A short name for a prune statement: its verb and first table."""
    verb = sql.lstrip().split(None, 1)[0].upper()
    table = _TABLE.search(sql)
    name = table.group(1).removeprefix("django_ultjobs_") if table else "?"
    if verb == "SELECT" and name == "job" and "COUNT(" not in sql.upper() \
            and re.search(r"LIMIT \d+$", sql.strip()):
        return BATCH_SELECT
    if verb == "SELECT" and "COUNT(" in sql.upper():
        verb = "COUNT"
    return f"{verb} {name}" if table else verb


SIZES = """
SELECT c.relname, pg_relation_size(c.oid)
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')
  AND (c.relname LIKE 'django_ultjobs_job%%' OR c.relname LIKE 'ultjobs_%%')
ORDER BY c.relname
"""


def sizes() -> dict[str, int]:
    """Bytes of every job table and index (heap alone for a table)."""
    with connection.cursor() as cur:
        cur.execute(SIZES)
        return {name: size for name, size in cur.fetchall() if size}


def sqlite() -> dict[str, Any]:
    """The admin pages on SQLite at ``--rows`` queued jobs: before and after ANALYZE."""
    setup_test_environment()
    call_command("migrate", verbosity=0)
    pages.register_jobs()
    started = time.perf_counter()
    added = fill.fill_queued_sqlite(ARGS.rows)
    result: dict[str, Any] = {"jobs": added, "fill_s": time.perf_counter() - started}
    result["before_analyze"] = pages.dump(pages.time_admin(ARGS.repeat, False)
                                          + pages.time_cli(ARGS.repeat, False)
                                          + pages.time_stats(ARGS.repeat, False))
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    result["after_analyze"] = pages.dump(pages.time_admin(ARGS.repeat, True)
                                         + pages.time_cli(ARGS.repeat, True)
                                         + pages.time_stats(ARGS.repeat, True))
    result["size_bytes"] = Path(connection.settings_dict["NAME"]).stat().st_size
    return result


def main() -> None:
    handler = {"setup": setup, "fill-history": fill_history, "fill-queued": fill_queued,
               "clear-live": clear_live, "top-up": top_up,
               "drain": drain, "pickup": pickup, "single": single, "read-paths": read_paths,
               "prune-cycle": prune_cycle, "sizes": sizes,
               "sqlite": sqlite}[ARGS.phase]
    result = handler()
    connection.close()
    common.emit(result if isinstance(result, dict) else {"value": result})


if __name__ == "__main__":
    common.exit_on_sigterm()
    main()
