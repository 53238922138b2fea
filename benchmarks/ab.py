"""``python -m benchmarks.ab``: two source trees of ours, drained in alternated pairs.

    python -m benchmarks.ab --a /path/to/tree-a --b /path/to/tree-b
                            [--workloads io-sync,io-async,django,mix,noop] [--pairs 5]

Decides whether a mechanism pays for itself: tree A keeps it, tree B removes it (each a git
worktree). Every pair drains each workload once per tree, A first in even pairs and B first in
odd ones, so drift on a shared machine falls on both alike. Each drain is one
``python -m benchmarks.peers.ours drain`` run inside its own tree (its code, its benchmark), on a
database of its own, and reports the bulk enqueue's jobs/s and the drain's jobs/s from the
database's timestamps. The table gives each tree's median, B over A, and the lowest and highest
of the pairs' own ratios: a difference inside that spread is noise.

Both trees must have the workloads asked for (``mix`` is ours only: ``benchmarks/peers``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Per workload: jobs per drain and the worker's flags (the peer benchmark's settings).
SETTINGS: dict[str, tuple[int, tuple[str, ...]]] = {
    "noop": (50_000, ("--threads", "32")),
    "io-sync": (10_000, ("--threads", "128")),
    "io-async": (10_000, ("--async-concurrency", "128")),
    "django": (5_000, ("--threads", "16")),
    "mix": (6_000, ("--threads", "32")),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__.split("\n")[0])
    p.add_argument("--a", required=True, type=Path, help="the tree that keeps the mechanism")
    p.add_argument("--b", required=True, type=Path, help="the tree that removes it")
    p.add_argument("--workloads", default="io-sync,io-async,django,mix")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter both trees run on (a venv with the test extras)")
    p.add_argument("--json", type=Path, help="also write every figure here")
    return p.parse_args(argv)


def phase(tree: Path, python: str, db: str, *args: str) -> dict[str, Any]:
    """One ``benchmarks.peers.ours`` phase inside ``tree``; its RESULT line."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.run([python, "-m", "benchmarks.peers.ours", *args, "--db", db],
                          cwd=tree, env=env, stdout=subprocess.PIPE, text=True, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{tree}: phase {args[0]} exited {proc.returncode} with no RESULT")


def drain(tree: Path, python: str, db: str, workload: str) -> dict[str, Any]:
    jobs, flags = SETTINGS[workload]
    setup = ("--workload", workload, "--jobs", str(jobs))
    return phase(tree, python, db, "drain", *setup, *flags)


def spread(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """B over A of the medians, and the lowest and highest ratio of a pair."""
    ratios = [y / x for x, y in zip(a, b, strict=True)]
    return statistics.median(b) / statistics.median(a), min(ratios), max(ratios)


def report(figures: dict[str, dict[str, dict[str, list[float]]]]) -> str:
    lines = ["| workload | figure | A median | B median | B/A | pairs' B/A |",
             "| --- | --- | --: | --: | --: | --- |"]
    for workload, by_tree in figures.items():
        for key, label in (("jobs_per_s", "drain jobs/s"), ("bulk", "bulk enqueue jobs/s")):
            a, b = by_tree["a"][key], by_tree["b"][key]
            if not a or len(a) != len(b):
                continue
            ratio, low, high = spread(a, b)
            lines.append(f"| {workload} | {label} | {statistics.median(a):,.0f} | "
                         f"{statistics.median(b):,.0f} | {ratio:.3f} | {low:.3f} to {high:.3f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    trees = {"a": args.a.resolve(), "b": args.b.resolve()}
    workloads = [w for w in args.workloads.split(",") if w]
    figures: dict[str, dict[str, dict[str, list[float]]]] = {
        w: {t: {"jobs_per_s": [], "bulk": []} for t in trees} for w in workloads}
    # Engineers sharing one server each drain databases of their own.
    suffix = os.environ.get("ULTJOBS_TEST_DB_SUFFIX", "")
    dbs = {t: f"ultjobs_peers_ab_{t}{suffix}" for t in trees}
    for t, tree in trees.items():
        phase(tree, args.python, dbs[t], "setup")
    try:
        for pair in range(args.pairs):
            order = ["a", "b"] if pair % 2 == 0 else ["b", "a"]
            for workload in workloads:
                for t in order:
                    result = drain(trees[t], args.python, dbs[t], workload)
                    for key in ("jobs_per_s", "bulk"):
                        figures[workload][t][key].append(result[key])
                    print(f"pair {pair + 1}/{args.pairs} {workload} {t}: "
                          f"{result['jobs_per_s']:,.0f} jobs/s", file=sys.stderr, flush=True)
    finally:
        for t, tree in trees.items():
            phase(tree, args.python, dbs[t], "teardown")
    print(report(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
