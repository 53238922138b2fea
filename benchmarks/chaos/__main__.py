"""``python -m benchmarks.chaos``: run the chaos scenarios against a private PostgreSQL.

    python -m benchmarks.chaos [--short] [--scenarios a,b] [--json] [--seed N]

Starts its own cluster (``initdb`` + ``pg_ctl`` on a free port, in a temporary directory),
migrates a database there, runs each scenario with real ``runjobworker`` processes, prints one
row per scenario, removes the cluster. Exits 1 when a scenario misses its bar. See "Chaos: how
we test it" in docs/guarantees.md for what each column counts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback

from benchmarks.chaos.cluster import PrivateCluster
from benchmarks.chaos.harness import DATABASE, Harness
from benchmarks.chaos.measure import ScenarioResult

COLUMNS = ("scenario", "jobs", "lost", "ran twice", "stuck", "cap viol.", "recover s", "bar")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from benchmarks.chaos.scenarios import SCENARIOS

    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--short", action="store_true",
                        help="a CI-sized run: fewer jobs and faults (well under 2 minutes)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help="comma-separated scenarios to run (default: all): "
                             + ", ".join(SCENARIOS))
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    args = parser.parse_args(argv)
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    return args


def format_table(results: list[ScenarioResult]) -> str:
    """The results as a Markdown table, notes under it."""
    rows = [COLUMNS, tuple("---" for _ in COLUMNS)]
    for r in results:
        rows.append((r.scenario, str(r.jobs), str(r.lost), str(r.ran_twice), str(r.stuck),
                     str(r.cap_violations), r.recovery_text(),
                     "pass" if r.passed else "FAIL: " + ", ".join(r.failures)))
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    lines += [f"* {r.scenario}: {'; '.join(r.notes)}" for r in results if r.notes]
    return "\n".join(lines)


def setup_django(cluster: PrivateCluster) -> None:
    os.environ.update(cluster.env(DATABASE))
    os.environ["CHAOS_TMP"] = str(cluster.root)
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.chaos.settings"
    import django
    from django.core.management import call_command

    django.setup()
    cluster.psql(f"CREATE DATABASE {DATABASE}")
    call_command("migrate", verbosity=0)
    call_command("migrate", database="sqlite", verbosity=0)


def run(args: argparse.Namespace) -> list[ScenarioResult]:
    from benchmarks.chaos.scenarios import SCENARIOS

    results = []
    with PrivateCluster() as cluster:
        setup_django(cluster)
        harness = Harness(cluster, short=args.short)
        for name in args.scenarios:
            rng = random.Random(f"{args.seed}:{name}")
            started = time.monotonic()
            try:
                result = SCENARIOS[name](harness, rng)
            except Exception as exc:  # a scenario that breaks is a failed row, not a lost run
                traceback.print_exc()
                result = ScenarioResult(name, failures=[f"scenario raised {exc!r}"])
            finally:
                harness.end()
                if not cluster.is_running():
                    cluster.start()
            result.notes.append(f"{time.monotonic() - started:.0f}s")
            print(f"chaos: {name} done", "pass" if result.passed else "FAIL", file=sys.stderr)
            results.append(result)
        from django.db import connections

        connections.close_all()
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    print(f"chaos: seed {args.seed}", file=sys.stderr)
    results = run(args)
    if args.json:
        print(json.dumps({"seed": args.seed, "short": args.short,
                          "results": [r.as_dict() for r in results]}, indent=2))
    else:
        print(format_table(results))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
