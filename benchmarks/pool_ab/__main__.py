"""The hand-written executor pool against ``ThreadPoolExecutor`` + a counter, on one drain.

    python -m benchmarks.pool_ab [--jobs 20000] [--passes 4] [--threads 8,32,128]
                                 [--engines postgres,sqlite]

Drains ``--jobs`` queued no-op jobs with one ``runjobworker --burst`` process, once with each pool
per thread count and pass, the two interleaved (pass by pass, the order alternating), and prints
the medians, the spread and the worker's CPU per job. PostgreSQL database ``BENCH_PG_NAME``
(default ``ultjobs_bench``) is dropped and created. See docs/performance.md item 26.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--passes", type=int, default=4)
    parser.add_argument("--threads", default="8,32,128")
    parser.add_argument("--engines", default="postgres,sqlite")
    parser.add_argument("--json", type=Path, help="append every drain's figures to this file")
    args = parser.parse_args()
    rows: list[dict] = []
    for engine in args.engines.split(","):
        env = dict(os.environ, DJANGO_SETTINGS_MODULE="benchmarks.settings", BENCH_ALIAS=engine,
                   PYTHONPATH=str(REPO))
        child = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.pool_ab.engine", str(args.jobs),
             str(args.passes), args.threads],
            env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        for line in child.stdout:
            row = json.loads(line)
            rows.append(row)
            print(f"{row['engine']} {row['threads']:>3} {row['pool']:<8} "
                  f"{row['jobs_s']:>8,.0f} jobs/s {row['cpu_us']:>6.1f} µs/job "
                  f"load {row['load']:.1f}", file=sys.stderr, flush=True)
            if args.json:
                with args.json.open("a") as out:
                    out.write(line)
        if child.wait():
            return child.returncode
    report(rows)
    return 0


def report(rows: list[dict]) -> None:
    print("engine | --threads | pool | drain jobs/s, median (min-max) | worker CPU µs/job, median "
          "(min-max) | load (1 min)")
    print(" | ".join("---" for _ in range(6)))
    keys = sorted({(r["engine"], r["threads"], r["pool"]) for r in rows},
                  key=lambda k: (k[0], k[1], k[2] != "ours"))
    for engine, threads, pool in keys:
        mine = [r for r in rows
                if (r["engine"], r["threads"], r["pool"]) == (engine, threads, pool)]
        rate = [r["jobs_s"] for r in mine]
        cpu = [r["cpu_us"] for r in mine]
        load = [r["load"] for r in mine]
        print(f"{engine} | {threads} | {pool} | {statistics.median(rate):,.0f} "
              f"({min(rate):,.0f}-{max(rate):,.0f}) | {statistics.median(cpu):.0f} "
              f"({min(cpu):.0f}-{max(cpu):.0f}) | {min(load):.1f}-{max(load):.1f}")


if __name__ == "__main__":
    sys.exit(main())
