"""Throughput benchmark: bulk enqueue, single enqueue latency, and drain by worker processes.

    python -m benchmarks.throughput [--jobs 20000] [--threads 8] [--processes 1]
                                    [--engines postgres,sqlite]

Prints jobs/s for each engine and, as the baseline measured in the same run, a naive queue
(claim one row per transaction, then mark it done) on the same database: the ratio is what the
batching buys, and it is stable where absolute figures on a shared 2-core machine are not.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=8, help="threads per worker process")
    parser.add_argument("--processes", type=int, default=1,
                        help="worker processes draining the queue at once")
    parser.add_argument("--engines", default="postgres,sqlite")
    parser.add_argument("--baseline-jobs", type=int, default=2_000)
    args = parser.parse_args()
    rows = []
    for engine in args.engines.split(","):
        rows.append(run_engine(engine.strip(), args.jobs, args.threads, args.baseline_jobs,
                               args.processes))
    print()
    print(f"django_ultjobs throughput — {args.jobs} no-op jobs, {args.processes} worker "
          f"process(es) x {args.threads} threads")
    header = ("engine", "bulk enqueue/s", "enqueue ms (own commit)", "enqueue ms (in txn)",
              "drain jobs/s", "naive baseline/s", "drain / baseline")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for r in rows:
        print(" | ".join([
            r["engine"], f"{r['bulk']:,.0f}", f"{r['single_commit_ms']:.3f}",
            f"{r['single_txn_ms']:.3f}", f"{r['drain']:,.0f}", f"{r['baseline']:,.0f}",
            f"{r['drain'] / r['baseline']:.1f}x",
        ]))
    return 0


def run_engine(engine: str, jobs: int, threads: int, baseline_jobs: int, processes: int) -> dict:
    """Measure one engine in a child process of its own (Django settings differ per engine)."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="benchmarks.settings", BENCH_ALIAS=engine,
               PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.throughput_engine", str(jobs), str(threads),
         str(baseline_jobs), str(processes)],
        env=env, cwd=REPO, check=True, capture_output=True, text=True,
    )
    sys.stderr.write(out.stderr)
    result = {"engine": engine}
    for line in out.stdout.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            result[key] = float(value)
    return result


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "statistics", "time"]
