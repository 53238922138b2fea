"""How long a workflow of many nodes takes to enqueue, in one transaction (docs/workflows.md).

    .venv/bin/python -m benchmarks.workflow_enqueue [--engine postgres|sqlite] [--nodes 10000]
                                                    [--rounds 5]

Each round enqueues one workflow of ``--nodes`` no-op nodes: a tenth of them roots, every other
node after one to three earlier nodes picked at random (seeded), a third of those with
``when="finished"``. Times the whole ``wf.enqueue()`` (the workflow's row, the jobs, their
graph columns and edges, the commit) and, apart, building the graph in Python. Prints each round
and the median. PostgreSQL runs in a throwaway database (``ultjobs_workflow_bench``, or
$BENCH_PG_NAME), dropped at the end; SQLite in a temporary file (IMMEDIATE mode, WAL).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

import psycopg

DB_NAME = os.environ.get("BENCH_PG_NAME", "ultjobs_workflow_bench")


def _admin() -> psycopg.Connection:
    return psycopg.connect(host=os.environ.get("ULTJOBS_PG_HOST", "127.0.0.1"),
                           user=os.environ.get("ULTJOBS_PG_USER", "postgres"),
                           port=os.environ.get("ULTJOBS_PG_PORT", "5432"),
                           dbname="postgres", autocommit=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ["BENCH_ALIAS"] = args.engine
    os.environ["BENCH_PG_NAME"] = DB_NAME
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["BENCH_TMP"] = tmp
        if args.engine == "postgres":
            with _admin() as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')
                admin.execute(f'CREATE DATABASE "{DB_NAME}"')
        try:
            _run(args.engine, args.nodes, args.rounds)
        finally:
            from django.db import connections
            connections.close_all()
            if args.engine == "postgres":
                with _admin() as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')


def _run(engine: str, nodes: int, rounds: int) -> None:
    import django
    django.setup()
    from django.core.management import call_command

    from benchmarks.jobs import noop
    from django_ultjobs import Workflow

    call_command("migrate", database=engine, verbosity=0)
    rng = random.Random(7)
    built, enqueued = [], []
    for n in range(rounds):
        start = time.perf_counter()
        wf = Workflow(name=f"bench-{n}")
        added = []
        for i in range(nodes):
            if i < nodes // 10:
                added.append(wf.add(noop.call()))
                continue
            after = rng.sample(added, rng.randint(1, 3))
            added.append(wf.add(noop.call(), after=after,
                                when="finished" if i % 3 == 0 else "succeeded"))
        ready = time.perf_counter()
        wf.enqueue()
        done = time.perf_counter()
        built.append(ready - start)
        enqueued.append(done - ready)
        print(f"round {n + 1}: built in {ready - start:.3f} s, enqueued in {done - ready:.3f} s")
    print(f"{engine}, {nodes:,} nodes: enqueue median {statistics.median(enqueued):.3f} s "
          f"(building the graph {statistics.median(built):.3f} s)")


if __name__ == "__main__":
    main()
