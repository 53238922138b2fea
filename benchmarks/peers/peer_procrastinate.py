"""Procrastinate in the peer benchmark, at its best documented setting.

    python -m benchmarks.peers.peer_procrastinate PHASE --db ultjobs_peers_procrastinate [--jobs N]

Phases as in ``benchmarks.peers.ours`` (setup, drain, single, pickup, teardown), plus ``worker``.

One worker process running async no-op tasks with ``concurrency=50`` and LISTEN/NOTIFY on (its
default), the psycopg connector with its default pool. Bulk enqueue uses ``batch_defer_async``.
Drain jobs/s comes from Procrastinate's own event table: the first ``started`` event to the last
``succeeded`` one (database clock), so process start-up and exit are not counted.

The I/O-bound workloads (``--workload io-sync`` / ``io-async``) run at
``--concurrency C`` like the others. Procrastinate runs a synchronous task in the event loop's
default executor (``asgiref``'s ``sync_to_async``); that executor is sized to C threads here, so
the blocking bodies get the same C.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import subprocess
import sys
import time
from typing import Any

from benchmarks.peers import common

CONCURRENCY = 50


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=(*common.PHASES, "worker"))
    parser.add_argument("--db", default="ultjobs_peers_procrastinate")
    parser.add_argument("--jobs", type=int, default=3_000)
    parser.add_argument("--samples", type=int, default=200, help="pickup samples")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--drain", action="store_true", help="worker: exit when caught up")
    parser.add_argument("--analyze", action="store_true", help="drain: ANALYZE after the enqueue")
    parser.add_argument("--workload", choices=("noop", "io-sync", "io-async"), default="noop")
    return parser.parse_args(argv)


def env(args: argparse.Namespace) -> dict[str, str]:
    return common.child_env(BENCH_PEERS_DB=args.db)


async def worker(args: argparse.Namespace) -> None:
    from benchmarks.peers.tasks_procrastinate import app

    asyncio.get_running_loop().set_default_executor(
        concurrent.futures.ThreadPoolExecutor(max_workers=args.concurrency))
    async with app.open_async():
        # wait=False: "terminate as soon as it has caught up with the queues" (the drain).
        await app.run_worker_async(concurrency=args.concurrency, wait=not args.drain,
                                   listen_notify=True, install_signal_handlers=True)


def worker_cmd(args: argparse.Namespace, drain: bool) -> list[str]:
    cmd = [sys.executable, "-m", "benchmarks.peers.peer_procrastinate", "worker", "--db",
           args.db, "--concurrency", str(args.concurrency)]
    return cmd + (["--drain"] if drain else [])


async def install() -> None:
    from benchmarks.peers.tasks_procrastinate import app

    async with app.open_async():
        await app.schema_manager.apply_schema_async()


def reset(dbname: str) -> None:
    common.execute(dbname, "TRUNCATE procrastinate_jobs, procrastinate_events, "
                           "procrastinate_workers RESTART IDENTITY CASCADE")


async def bulk_enqueue(count: int, workload: str = "noop") -> float:
    from benchmarks.peers import tasks_procrastinate as t

    app = t.app
    peers_noop = {"noop": t.peers_noop, "io-sync": t.peers_io_sync,
                  "io-async": t.peers_io_async}[workload]
    async with app.open_async():
        started = time.perf_counter()
        # Each batch_defer_async is one statement and its own transaction (Procrastinate's API
        # takes no outer transaction); the chunks match the other systems'.
        for start in range(0, count, common.BULK_CHUNK):
            n = min(common.BULK_CHUNK, count - start)
            await peers_noop.batch_defer_async(*([{}] * n))
        return count / (time.perf_counter() - started)


def drain(args: argparse.Namespace) -> dict[str, float]:
    proc = subprocess.Popen(worker_cmd(args, drain=True), cwd=common.REPO, env=env(args),
                            stdout=sys.stderr)
    with common.CpuMeter(proc.pid) as meter:
        code = common.wait_or_kill(proc, max(300.0, args.jobs / 20), "Procrastinate drain")
    if code != 0:
        raise RuntimeError(f"Procrastinate worker exited {code}")
    done = common.scalar(args.db, "SELECT count(*) FROM procrastinate_jobs "
                                  "WHERE status = 'succeeded'")
    if done != args.jobs:
        raise RuntimeError(f"Procrastinate drain: {done} succeeded of {args.jobs}")
    start = float(common.scalar(args.db, "SELECT extract(epoch FROM min(at)) "
                                         "FROM procrastinate_events WHERE type = 'started'"))
    end = float(common.scalar(args.db, "SELECT extract(epoch FROM max(at)) "
                                       "FROM procrastinate_events WHERE type = 'succeeded'"))
    return common.drain_figures(args.jobs, start, end, meter)


async def single_enqueue_ms() -> float:
    from benchmarks.peers.tasks_procrastinate import app, peers_noop

    async with app.open_async():
        timings = []
        for _ in range(common.SINGLE_ENQUEUES):
            started = time.perf_counter()
            await peers_noop.defer_async()
            timings.append(time.perf_counter() - started)
    return common.median(timings) * 1000.0


def pickup(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.peers.tasks_procrastinate import app, peers_ping

    reset(args.db)
    probe = common.PickupProbe()
    proc = subprocess.Popen(worker_cmd(args, drain=False), cwd=common.REPO, env=env(args),
                            stdout=sys.stderr)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(app.open_async())

    def enqueue(seq: int) -> float:
        # defer_async runs in a transaction of its own; it has returned once that committed.
        loop.run_until_complete(peers_ping.defer_async(seq=seq, port=probe.port))
        return time.monotonic()

    try:
        return common.measure_pickup(enqueue, probe, args.samples)
    finally:
        common.stop_worker(proc)
        loop.run_until_complete(app.close_async())
        loop.close()
        probe.close()


def main() -> None:
    args = parse_args(sys.argv[1:])
    os.environ["BENCH_PEERS_DB"] = args.db  # read when tasks_procrastinate is imported
    result: dict[str, Any] = {}
    if args.phase == "worker":
        asyncio.run(worker(args))
        return
    if args.phase == "setup":
        common.create_database(args.db)
        asyncio.run(install())
        result = {"version": common.dist_version("procrastinate"),
                  "setting": f"concurrency {args.concurrency}"}
    elif args.phase == "drain":
        reset(args.db)
        result["bulk"] = asyncio.run(bulk_enqueue(args.jobs, args.workload))
        if args.analyze:
            common.execute(args.db, "ANALYZE procrastinate_jobs, procrastinate_events")
        result.update(drain(args))
    elif args.phase == "single":
        reset(args.db)
        result["single_commit_ms"] = asyncio.run(single_enqueue_ms())
    elif args.phase == "pickup":
        result = pickup(args)
    elif args.phase == "teardown":
        common.drop_database(args.db)
    common.emit(result)


if __name__ == "__main__":
    common.exit_on_sigterm()
    main()
