"""Idle pickup, paired: this checkout against another one and PgQueuer, rounds interleaved.

    python -m benchmarks.pickup --base /tmp/base --rounds 4 --samples 200 --threads 16

Each round runs ``benchmarks.peers.ours pickup`` from this checkout, then from each ``--base`` (a
checkout of a version to compare with; none if not given), then
``benchmarks.peers.peer_pgqueuer pickup``; the order rotates per round so no system always
runs first. Databases are ``ultjobs_peers_<system><--suffix>``, created and dropped here. Only
ratios within one run mean anything on a shared machine.
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

REPO = Path(__file__).resolve().parent.parent


def run(repo: Path, module: str, *args: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo)
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=repo, env=env,
                          stdout=subprocess.PIPE, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{module} {args[0]} in {repo} failed (exit {proc.returncode})")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.pickup")
    p.add_argument("--base", type=Path, action="append", default=[],
                   help="another checkout to compare with (repeatable)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--suffix", default="_pickup")
    p.add_argument("--prepare-threshold", default="5")
    p.add_argument("--no-pgqueuer", action="store_true")
    args = p.parse_args()
    systems: dict[str, tuple[Path, str, list[str]]] = {
        "ours": (REPO, "benchmarks.peers.ours",
                 ["--db", f"ultjobs_peers_ours{args.suffix}",
                  "--prepare-threshold", args.prepare_threshold]),
    }
    for i, base in enumerate(args.base):
        name = "base" if len(args.base) == 1 else f"base{i}"
        systems[name] = (base.resolve(), "benchmarks.peers.ours",
                         ["--db", f"ultjobs_peers_{name}{args.suffix}",
                          "--prepare-threshold", args.prepare_threshold])
    if not args.no_pgqueuer:
        systems["pgqueuer"] = (REPO, "benchmarks.peers.peer_pgqueuer",
                               ["--db", f"ultjobs_peers_pgqueuer{args.suffix}"])
    for repo, module, extra in systems.values():
        run(repo, module, "setup", *extra)
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in systems}
    names = list(systems)
    try:
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                repo, module, extra = systems[name]
                more = ["--samples", str(args.samples)]
                if module.endswith(".ours"):
                    more += ["--threads", str(args.threads)]
                got = run(repo, module, "pickup", *extra, *more)
                figures[name].append(got)
                print(f"round {r} {name}: p50 {got['p50_ms']:.2f} p99 {got['p99_ms']:.2f} "
                      f"lost {got['lost']}", file=sys.stderr, flush=True)
    finally:
        for repo, module, extra in systems.values():
            run(repo, module, "teardown", *extra)
    report = {name: {"p50_ms": statistics.median(f["p50_ms"] for f in runs),
                     "p99_ms": statistics.median(f["p99_ms"] for f in runs),
                     "rounds": [(round(f["p50_ms"], 2), round(f["p99_ms"], 2)) for f in runs]}
              for name, runs in figures.items() if runs}
    print("RESULT " + json.dumps(report))


if __name__ == "__main__":
    main()
