"""The hand-written executor pool against ``ThreadPoolExecutor`` + a counter, on one drain.

    python -m benchmarks.pool_ab [--jobs 20000] [--passes 4] [--threads 8,32,128]
                                 [--engines postgres,sqlite]

Drains ``--jobs`` queued no-op jobs with one ``runjobworker --burst`` process, once with each pool
per thread count and pass, the two interleaved (pass by pass, the order alternating), and prints
the medians, the spread and the worker's CPU per job. PostgreSQL database ``BENCH_PG_NAME``
(default ``ultjobs_bench``) is dropped and created.
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
    parser.add_argument("--report", type=Path,
                        help="print the report of a --json file instead of measuring")
    args = parser.parse_args()
    if args.report:
        report([json.loads(line) for line in args.report.read_text().splitlines()])
        return 0
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
    """Medians and spreads per pool, and executor / ours per pass (the two drains of a pass ran
    back to back, so the ratio cancels most of what the machine's load did to both)."""
    print("engine | --threads | drain jobs/s, ours | executor | executor / ours, per pass "
          "| worker CPU us/job, ours | executor | executor / ours, per pass | load (1 min)")
    print(" | ".join("---" for _ in range(9)))
    for engine, threads in sorted({(r["engine"], r["threads"]) for r in rows}):
        mine = [r for r in rows if (r["engine"], r["threads"]) == (engine, threads)]
        by_pass = {(r["pass_"], r["pool"]): r for r in mine}
        passes = sorted({p for p, pool in by_pass if (p, "ours") in by_pass
                         and (p, "executor") in by_pass})
        cells = [engine, str(threads)]
        for key, fmt in (("jobs_s", "{:,.0f}"), ("cpu_us", "{:.0f}")):
            for pool in ("ours", "executor"):
                cells.append(spread([r[key] for r in mine if r["pool"] == pool], fmt))
            cells.append(spread([by_pass[p, "executor"][key] / by_pass[p, "ours"][key]
                                 for p in passes], "{:.2f}"))
        load = [r["load"] for r in mine]
        cells.append(f"{min(load):.1f}-{max(load):.1f}")
        print(" | ".join(cells))


def spread(values: list[float], fmt: str) -> str:
    """The median, and the least and greatest value in brackets."""
    if not values:
        return "-"
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}-{fmt.format(max(values))})")


if __name__ == "__main__":
    sys.exit(main())
