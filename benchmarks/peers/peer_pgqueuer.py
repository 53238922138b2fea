"""PgQueuer in the peer benchmark, at its best documented setting.

    python -m benchmarks.peers.peer_pgqueuer PHASE --db ultjobs_peers_pgqueuer [--jobs N]

Phases as in ``benchmarks.peers.ours`` (setup, drain, single, pickup, teardown), plus ``worker``:
the worker process itself.

The asyncpg driver (the one PgQueuer's documentation leads with; on this machine it drains about
1.6x faster than its psycopg driver), ``QueueManager.run(batch_size=100)``, LISTEN/NOTIFY wake-ups
(always on), heartbeats at their defaults. One worker process. Drain jobs/s comes from PgQueuer's
own log table: the first ``picked`` row to the last ``successful`` row (database clock), so
process start-up and drain mode's exit wait are not counted. Log aggregation is switched off
(``log_aggregation_interval=timedelta(0)``) so those rows stay to be read; it would otherwise run
every 30 s, i.e. not inside a drain of a few seconds anyway.

The I/O-bound workloads (``--workload io-sync`` / ``io-async``) run at
``--concurrency C``: ``max_concurrent_tasks=C`` (its hard cap on the jobs a worker holds) with
``batch_size=C/2`` (it requires the cap to be at least twice the batch). PgQueuer takes async
entrypoints only; its documented way to a blocking body is ``await asyncio.to_thread(...)``, and
the loop's default executor is sized to C threads so the blocking bodies get the same C.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import signal
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

from benchmarks.peers import common

BATCH_SIZE = 100


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=(*common.PHASES, "worker"))
    parser.add_argument("--db", default="ultjobs_peers_pgqueuer")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=200, help="pickup samples")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument("--drain", action="store_true", help="worker: exit when the queue is empty")
    parser.add_argument("--analyze", action="store_true", help="drain: ANALYZE after the enqueue")
    parser.add_argument("--workload", choices=("noop", "io-sync", "io-async"), default="noop")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="max_concurrent_tasks (batch_size becomes half of it)")
    return parser.parse_args(argv)


ENTRYPOINTS = {"noop": "noop", "io-sync": "io_sync", "io-async": "io_async"}


async def queries(dbname: str) -> tuple[Any, Any]:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(common.dsn(dbname))
    return conn, Queries(AsyncpgDriver(conn))


# -- the worker process ---------------------------------------------------------------------------


async def worker(args: argparse.Namespace) -> None:
    from pgqueuer import QueueManager
    from pgqueuer.types import QueueExecutionMode

    conn, q = await queries(args.db)
    qm = QueueManager(q)

    @qm.entrypoint("noop")
    async def noop(job: Any) -> None:
        return None

    @qm.entrypoint("ping")
    async def ping(job: Any) -> None:
        seq, port = job.payload.decode().split(":")
        common.send_started(int(seq), int(port))

    @qm.entrypoint("io_sync")
    async def io_sync(job: Any) -> None:
        await asyncio.to_thread(time.sleep, common.IO_SECONDS)

    @qm.entrypoint("io_async")
    async def io_async(job: Any) -> None:
        await asyncio.sleep(common.IO_SECONDS)

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, qm.shutdown.set)
    mode = QueueExecutionMode.drain if args.drain else QueueExecutionMode.continuous
    limits: dict[str, Any] = {"batch_size": args.batch_size}
    if args.concurrency:
        limits = {"batch_size": max(1, args.concurrency // 2),
                  "max_concurrent_tasks": args.concurrency}
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(max_workers=args.concurrency))
    await qm.run(mode=mode, log_aggregation_interval=timedelta(0), **limits)
    await conn.close()


def worker_cmd(args: argparse.Namespace, drain: bool) -> list[str]:
    cmd = [sys.executable, "-m", "benchmarks.peers.peer_pgqueuer", "worker", "--db", args.db,
           "--batch-size", str(args.batch_size)]
    if args.concurrency:
        cmd += ["--concurrency", str(args.concurrency)]
    return cmd + (["--drain"] if drain else [])


# -- the benchmark ------------------------------------------------------------------------------


async def install(dbname: str) -> None:
    conn, q = await queries(dbname)
    await q.install()
    await conn.close()


async def reset(dbname: str) -> None:
    conn, _ = await queries(dbname)
    await conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics RESTART IDENTITY")
    await conn.close()


async def bulk_enqueue(dbname: str, count: int, workload: str = "noop") -> float:
    conn, q = await queries(dbname)
    started = time.perf_counter()
    async with conn.transaction():
        for start in range(0, count, common.BULK_CHUNK):
            n = min(common.BULK_CHUNK, count - start)
            await q.enqueue([ENTRYPOINTS[workload]] * n, [None] * n, [0] * n)
    rate = count / (time.perf_counter() - started)
    await conn.close()
    return rate


def drain(args: argparse.Namespace) -> dict[str, float]:
    proc = subprocess.Popen(worker_cmd(args, drain=True), cwd=common.REPO, env=common.child_env(),
                            stdout=sys.stderr)
    with common.CpuMeter(proc.pid) as meter:
        code = common.wait_or_kill(proc, max(300.0, args.jobs / 100), "PgQueuer drain")
    if code != 0:
        raise RuntimeError(f"PgQueuer worker exited {code}")
    done = common.scalar(args.db, "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")
    left = common.scalar(args.db, "SELECT count(*) FROM pgqueuer")
    if done != args.jobs or left:
        raise RuntimeError(f"PgQueuer drain: {done} successful, {left} left of {args.jobs}")
    start = float(common.scalar(args.db, "SELECT extract(epoch FROM min(created)) "
                                         "FROM pgqueuer_log WHERE status = 'picked'"))
    end = float(common.scalar(args.db, "SELECT extract(epoch FROM max(created)) "
                                       "FROM pgqueuer_log WHERE status = 'successful'"))
    return common.drain_figures(args.jobs, start, end, meter)


async def single_enqueue_ms(dbname: str) -> float:
    conn, q = await queries(dbname)
    timings = []
    for _ in range(common.SINGLE_ENQUEUES):
        started = time.perf_counter()
        await q.enqueue("noop", None)
        timings.append(time.perf_counter() - started)
    await conn.close()
    return common.median(timings) * 1000.0


def pickup(args: argparse.Namespace) -> dict[str, Any]:
    asyncio.run(reset(args.db))
    probe = common.PickupProbe()
    proc = subprocess.Popen(worker_cmd(args, drain=False), cwd=common.REPO,
                            env=common.child_env(), stdout=sys.stderr)
    loop = asyncio.new_event_loop()
    conn, q = loop.run_until_complete(queries(args.db))

    def enqueue(seq: int) -> float:
        # asyncpg outside a transaction block: the INSERT commits on its own.
        loop.run_until_complete(q.enqueue("ping", f"{seq}:{probe.port}".encode()))
        return time.monotonic()

    try:
        return common.measure_pickup(enqueue, probe, args.samples)
    finally:
        common.stop_worker(proc)
        loop.run_until_complete(conn.close())
        loop.close()
        probe.close()


def main() -> None:
    args = parse_args(sys.argv[1:])
    result: dict[str, Any] = {}
    if args.phase == "worker":
        asyncio.run(worker(args))
        return
    if args.phase == "setup":
        common.create_database(args.db)
        asyncio.run(install(args.db))
        result = {"version": common.dist_version("pgqueuer"),
                  "setting": f"batch_size {args.batch_size}, asyncpg"}
    elif args.phase == "drain":
        asyncio.run(reset(args.db))
        result["bulk"] = asyncio.run(bulk_enqueue(args.db, args.jobs, args.workload))
        if args.analyze:
            common.execute(args.db, "ANALYZE pgqueuer, pgqueuer_log")
        result.update(drain(args))
    elif args.phase == "single":
        asyncio.run(reset(args.db))
        result["single_commit_ms"] = asyncio.run(single_enqueue_ms(args.db))
    elif args.phase == "pickup":
        result = pickup(args)
    elif args.phase == "teardown":
        common.drop_database(args.db)
    common.emit(result)


if __name__ == "__main__":
    common.exit_on_sigterm()
    main()
