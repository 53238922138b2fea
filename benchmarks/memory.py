"""Does one ``runjobworker`` keep its memory flat over a million jobs? RSS across a long drain.

    python -m benchmarks.memory [--jobs 1000000] [--threads 32] [--chunk 100000]
                                [--db ultjobs_peers_memory] [--interval 0.5] [--json PATH]

A worker runs for weeks, so anything it keeps per job (a run left in a registry, a cache keyed by
job id, an unbounded log of statements) grows without bound; a drain of thousands of jobs is too
short to see that, a million no-op jobs through ONE process is not. Target: the resident set size
stays within ±10 % of its size after warm-up.

On a fresh PostgreSQL database (created, migrated, dropped at the end; the shared helpers only
touch databases named ``ultjobs_peers_*``), ONE continuous ``runjobworker --threads T`` (not
``--burst``) drains ``--jobs`` no-op jobs. They are enqueued ``--chunk`` at a time and topped up
whenever fewer than half a chunk are queued, so the worker sees a realistic table (a bounded
backlog over a growing history of finished rows) rather than a million queued rows at once.

Every ``--interval`` seconds a sampler thread reads the worker's VmRSS from /proc/<pid>/status and
the jobs done so far. Reported: RSS at warm-up (5 % of the jobs done: imports, connections,
prepared statements and thread stacks are in place by then), at 25/50/75/100 %, the highest
sample from warm-up on, growth from warm-up to the end, and drain jobs/s from the database's own
timestamps. PASS when both the end and the highest sample are within ±10 % of warm-up; the exit
status is 1 on FAIL. A markdown table goes to stdout, then one ``RESULT {json}`` line as in
``benchmarks.peers``; ``--json`` also writes the result with the whole RSS series.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.peers import common
from benchmarks.peers.common import log

#: Progress points reported, in % of the jobs done; the first one is the warm-up baseline.
POINTS: tuple[float, ...] = (5.0, 25.0, 50.0, 75.0, 100.0)
TOLERANCE_PCT = 10.0
#: A drain that finishes no job for this long is stuck, not slow: fail rather than hang.
STALL_SECONDS = 120.0

# One snapshot gives both what the top-up needs (queued) and the progress: ids are handed out
# without gaps on a fresh database, so max(id) is the number of jobs enqueued and committed, and
# done = enqueued - live. Counting the live rows walks the claim's partial index (the backlog,
# at most 1.5 chunks); counting succeeded rows would walk up to a million rows twice a second,
# stealing CPU from the drain it measures.
PROGRESS_SQL = """
SELECT (SELECT COALESCE(max(id), 0) FROM django_ultjobs_job),
       count(*) FILTER (WHERE status = 'queued'),
       count(*)
FROM django_ultjobs_job WHERE status IN ('queued', 'running', 'waiting')
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.memory",
                                description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1_000_000)
    p.add_argument("--threads", type=int, default=32, help="the worker's --threads")
    p.add_argument("--chunk", type=int, default=100_000,
                   help="jobs per enqueue; the next chunk goes in below half a chunk queued")
    p.add_argument("--db", default="ultjobs_peers_memory",
                   help="database to create and drop (must be named ultjobs_peers_*)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    p.add_argument("--json", type=Path, help="also write the result and the RSS series here")
    p.add_argument("--no-vacuum", action="store_true",
                   help="do not VACUUM (ANALYZE) the job tables at each top-up (the default "
                        "stands in for autovacuum, which production runs and this machine's "
                        "server has off)")
    args = p.parse_args(argv)
    if min(args.jobs, args.threads, args.chunk) < 1 or args.interval <= 0:
        p.error("--jobs, --threads, --chunk and --interval must be positive")
    return args


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic() just before the progress query was sent
    rss_kb: int
    hwm_kb: int
    enqueued: int
    queued: int
    done: int


def read_memory(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of ``pid`` in kB; None once the process is gone (or a zombie)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    if "VmRSS" not in fields:
        return None
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


class Sampler:
    """A thread of its own, so a chunk being enqueued does not leave a hole in the series."""

    def __init__(self, pid: int, dbname: str, interval: float) -> None:
        self.pid = pid
        self.dbname = dbname
        self.interval = interval
        self.samples: list[Sample] = []
        self.probe_ms: list[float] = []
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return list(self.samples)

    def wait_after(self, after: float, timeout: float) -> Sample | None:
        """The latest sample whose snapshot was taken after ``after`` (monotonic), waiting for
        one up to ``timeout``; re-raises the sampler's own failure."""

        def ready() -> bool:
            return self.error is not None or bool(self.samples and self.samples[-1].at > after)

        with self._cond:
            self._cond.wait_for(ready, timeout)
            if self.error is not None:
                raise RuntimeError("the sampler failed") from self.error
            return self.samples[-1] if ready() else None

    def _loop(self) -> None:
        import psycopg

        try:
            with psycopg.connect(common.dsn(self.dbname), autocommit=True) as conn:
                due = time.monotonic()
                while not self._stop.is_set():
                    memory = read_memory(self.pid)
                    at = time.monotonic()
                    enqueued, queued, live = conn.execute(PROGRESS_SQL).fetchone()
                    probe_ms = (time.monotonic() - at) * 1000.0
                    if memory is not None:
                        with self._cond:
                            self.samples.append(Sample(at, memory[0], memory[1], enqueued,
                                                       queued, enqueued - live))
                            self.probe_ms.append(probe_ms)
                            self._cond.notify_all()
                    # A fixed schedule, so a slow probe does not stretch the interval.
                    due += self.interval
                    self._stop.wait(max(0.0, due - time.monotonic()))
        except BaseException as exc:
            with self._cond:
                self.error = exc
                self._cond.notify_all()


def vacuum() -> None:
    from django.db import connection

    from benchmarks.peers import ours

    with connection.cursor() as cur:
        cur.execute(f"VACUUM (ANALYZE) {', '.join(ours.job_tables())}")


def drain(args: argparse.Namespace) -> tuple[list[Sample], dict[str, Any]]:
    """Top up the backlog until ``--jobs`` are enqueued, sample until all are done, stop the
    worker with SIGTERM; return the samples and the drain's figures."""
    from django.db import connection

    from benchmarks.peers import ours

    enqueued = min(args.chunk, args.jobs)
    enqueue_rates = [ours.bulk_enqueue(enqueued)]
    log(f"enqueued {enqueued:,} of {args.jobs:,}; starting runjobworker --threads {args.threads}")
    proc = subprocess.Popen(
        ours.worker_cmd(args.threads, burst=False), cwd=common.REPO, stdout=sys.stderr,
        env=common.child_env(BENCH_PEERS_DB=args.db, BENCH_PEERS_SYSTEM="ours",
                             BENCH_PEERS_CAPPED="0"))
    sampler = Sampler(proc.pid, args.db, args.interval)
    started = time.monotonic()
    sampler.start()
    try:
        seen = last_enqueue = started
        most_done, progressed_at, next_log = 0, started, 0
        while True:
            sample = sampler.wait_after(max(seen, last_enqueue), max(10.0, 4 * args.interval))
            if proc.poll() is not None:
                raise RuntimeError(f"runjobworker exited {proc.returncode} before the drain "
                                   f"was over ({most_done:,} of {args.jobs:,} jobs done)")
            if sample is None:
                continue
            seen = sample.at
            if sample.done >= args.jobs:
                break
            if sample.done > most_done:
                most_done, progressed_at = sample.done, sample.at
            elif sample.at - progressed_at > STALL_SECONDS:
                raise RuntimeError(f"no job finished for {STALL_SECONDS:.0f}s "
                                   f"({most_done:,} of {args.jobs:,} done)")
            if sample.done >= next_log:
                log(f"{sample.done:,} done, {sample.queued:,} queued, "
                    f"RSS {sample.rss_kb / 1024:.1f} MiB")
                next_log = sample.done + max(1, args.jobs // 10)
            if enqueued < args.jobs and sample.queued < args.chunk / 2:
                count = min(args.chunk, args.jobs - enqueued)
                enqueue_rates.append(ours.bulk_enqueue(count))
                enqueued += count
                if not args.no_vacuum:
                    # Every job leaves three dead row versions; without autovacuum a million of
                    # them slowed this drain from 8,000 to 2,700 jobs/s, which is the server's
                    # configuration, not the worker's memory. ANALYZE too, as autovacuum does: a
                    # VACUUM alone left the planner a row count without statistics and the claim
                    # sorted all 70,000 runnable rows (53 ms a claim, 700 jobs/s).
                    vacuum()
                last_enqueue = time.monotonic()
        samples = sampler.stop()
        common.stop_worker(proc, timeout=60.0)
        if proc.returncode != 0:
            raise RuntimeError(f"runjobworker exited {proc.returncode} on SIGTERM, not 0")
    finally:
        sampler.stop()
        if proc.poll() is None:
            common.stop_worker(proc)
    with connection.cursor() as cur:
        cur.execute("SELECT count(*), extract(epoch FROM max(finished_at) - min(claimed_at)) "
                    "FROM django_ultjobs_job WHERE status = 'succeeded'")
        succeeded, seconds = cur.fetchone()
    if succeeded != args.jobs:
        raise RuntimeError(f"{succeeded:,} of {args.jobs:,} jobs succeeded")
    return samples, {
        "jobs_per_s": args.jobs / float(seconds),
        "drain_seconds": float(seconds),
        "wall_seconds": sample.at - started,
        "enqueue_per_s": common.median(enqueue_rates),
        "probe_ms_median": common.median(sampler.probe_ms),
        "probe_ms_max": max(sampler.probe_ms),
    }


def first_at(samples: list[Sample], jobs: int, pct: float) -> Sample:
    """The first sample with at least ``pct`` % of the jobs done."""
    target = math.ceil(jobs * pct / 100.0)
    return next(s for s in samples if s.done >= target)


def summarize(args: argparse.Namespace, samples: list[Sample], figures: dict[str, Any]
              ) -> dict[str, Any]:
    points = [first_at(samples, args.jobs, pct) for pct in POINTS]
    warm, end = points[0], points[-1]
    # Start-up's growth (imports, first connections) is what warm-up excludes; so does the max.
    highest = max(s.rss_kb for s in samples if warm.at <= s.at <= end.at)
    growth = (end.rss_kb - warm.rss_kb) / warm.rss_kb * 100.0
    highest_pct = (highest - warm.rss_kb) / warm.rss_kb * 100.0
    return {
        "jobs": args.jobs, "vacuum": not args.no_vacuum, "threads": args.threads,
        "chunk": args.chunk,
        "interval": args.interval, "samples": len(samples),
        "first_rss_kb": samples[0].rss_kb,
        "points": [{"pct": pct, "done": s.done, "rss_kb": s.rss_kb}
                   for pct, s in zip(POINTS, points, strict=True)],
        "warmup_rss_kb": warm.rss_kb, "end_rss_kb": end.rss_kb, "max_rss_kb": highest,
        "hwm_kb": end.hwm_kb,
        "growth_pct": growth, "max_over_warmup_pct": highest_pct,
        "tolerance_pct": TOLERANCE_PCT,
        "pass": abs(growth) <= TOLERANCE_PCT and highest_pct <= TOLERANCE_PCT,
        **figures,
    }


def render(result: dict[str, Any]) -> str:
    def mib(kb: int) -> str:
        return f"{kb / 1024:.1f}"

    def vs_warm(kb: int) -> str:
        return f"{(kb - result['warmup_rss_kb']) / result['warmup_rss_kb'] * 100.0:+.1f} %"

    out = [
        f"Memory of one `runjobworker --threads {result['threads']}` across "
        f"{result['jobs']:,} no-op jobs on PostgreSQL (backlog topped up "
        f"{result['chunk']:,} at a time; VmRSS sampled every {result['interval']:g} s, "
        f"{result['samples']} samples)",
        "",
        "| point | jobs done | RSS MiB | vs warm-up |",
        "|---|--:|--:|--:|",
        f"| first sample (start-up) | | {mib(result['first_rss_kb'])} | |",
    ]
    warm, *later = result["points"]
    out.append(f"| warm-up ({warm['pct']:g} %) | {warm['done']:,} | {mib(warm['rss_kb'])} | |")
    for point in later:
        out.append(f"| {point['pct']:g} % | {point['done']:,} | {mib(point['rss_kb'])} | "
                   f"{vs_warm(point['rss_kb'])} |")
    out += [
        f"| max from warm-up on | | {mib(result['max_rss_kb'])} | "
        f"{vs_warm(result['max_rss_kb'])} |",
        f"| peak of the whole life (VmHWM) | | {mib(result['hwm_kb'])} | "
        f"{vs_warm(result['hwm_kb'])} |",
        "",
        f"Growth warm-up → end {result['growth_pct']:+.1f} %, highest "
        f"{result['max_over_warmup_pct']:+.1f} %: **{'PASS' if result['pass'] else 'FAIL'}** "
        f"(target ±{result['tolerance_pct']:g} %).",
        f"Drain {result['jobs_per_s']:,.0f} jobs/s ({result['drain_seconds']:.1f} s, first "
        f"claim to last settle; {result['wall_seconds']:.1f} s wall); bulk enqueue "
        f"{result['enqueue_per_s']:,.0f} jobs/s; progress probe {result['probe_ms_median']:.1f} "
        f"ms median, {result['probe_ms_max']:.1f} ms max.",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Before Django starts: the settings read the database name from the environment.
    os.environ["BENCH_PEERS_DB"] = args.db
    os.environ["BENCH_PEERS_SYSTEM"] = "ours"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.peers.settings")
    common.create_database(args.db)
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        samples, figures = drain(args)
    finally:
        from django.db import connections

        connections.close_all()
        common.drop_database(args.db)
    result = summarize(args, samples, figures)
    print(render(result))
    common.emit(result)
    if args.json is not None:
        series = [[round(s.at - samples[0].at, 3), s.rss_kb, s.done] for s in samples]
        args.json.write_text(json.dumps({**result, "series_t_rsskb_done": series}, indent=1))
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    common.exit_on_sigterm()
    sys.exit(main())
