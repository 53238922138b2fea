"""Celery on its Redis broker in the peer benchmark.

    python -m benchmarks.peers.peer_celery PHASE --db ultjobs_peers_celery --broker URL [...]

Phases as in ``benchmarks.peers.ours`` (setup, drain, single, pickup, teardown). ``setup`` finds
the broker: db 5 of the Redis server at 127.0.0.1:6379 when it answers, else a private
``redis-server --port 6390 --save ''`` that ``teardown`` stops; it prints the URL, which the
runner passes to every later phase. ``teardown`` empties db 5 (FLUSHDB, never FLUSHALL: the
server is shared) and drops the database of the Django-shaped job's table.

One ``celery worker`` process (``--pool prefork`` or ``threads``, ``--concurrency C``),
``task_acks_late=True``, gossip, mingle and worker heartbeats off (Celery's advice for a worker
that does not need them), the same jobs as the others. Drain jobs/s comes from the worker's own
events (``celery_timings``): the first ``task_prerun`` to the last ``task_postrun``, so process
start-up and exit are not counted. Bulk enqueue is ``apply_async`` in a loop on one producer
connection (what ``group().apply_async()`` does; Celery has no bulk send).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.peers import celery_timings, common

SHARED_REDIS = ("127.0.0.1", 6379)
PRIVATE_PORT = 6390
REDIS_DB = 5
PIDFILE = Path("/tmp/ultjobs-peers-redis-6390.pid")
QUEUE = "ultjobs_peers"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=common.PHASES)
    parser.add_argument("--db", default="ultjobs_peers_celery")
    parser.add_argument("--broker", default=f"redis://127.0.0.1:6379/{REDIS_DB}")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200, help="pickup samples")
    parser.add_argument("--pool", choices=("prefork", "threads"), default="prefork")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--prefetch", type=int, default=4,
                        help="worker_prefetch_multiplier (Celery's default: 4)")
    parser.add_argument("--workload", choices=("noop", "io-sync", "django"), default="noop")
    parser.add_argument("--analyze", action="store_true", help="accepted, nothing to analyze")
    return parser.parse_args(argv)


# -- the broker -----------------------------------------------------------------------------------


def redis_answers(host: str, port: int) -> bool:
    import redis

    try:
        return bool(redis.Redis(host=host, port=port, socket_connect_timeout=1).ping())
    except redis.exceptions.ConnectionError:
        return False


def choose_broker() -> dict[str, Any]:
    """db 5 of the shared server; a private server on 6390 (started here) if it is down."""
    if redis_answers(*SHARED_REDIS):
        return {"broker": f"redis://{SHARED_REDIS[0]}:{SHARED_REDIS[1]}/{REDIS_DB}",
                "private_redis": False}
    subprocess.run(["redis-server", "--port", str(PRIVATE_PORT), "--save", "",
                    "--appendonly", "no", "--daemonize", "yes", "--pidfile", str(PIDFILE)],
                   check=True, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not redis_answers("127.0.0.1", PRIVATE_PORT):
        if time.monotonic() > deadline:
            raise RuntimeError("the private redis-server on 6390 did not start")
        time.sleep(0.1)
    return {"broker": f"redis://127.0.0.1:{PRIVATE_PORT}/{REDIS_DB}", "private_redis": True}


def redis_client(broker: str) -> Any:
    import redis

    return redis.Redis.from_url(broker)


def teardown_broker(broker: str) -> None:
    redis_client(broker).flushdb()  # db 5 only: the server is shared
    if f":{PRIVATE_PORT}/" in broker and PIDFILE.exists():
        # The private server this benchmark started, by the pid it wrote; never another.
        os.kill(int(PIDFILE.read_text().strip()), 15)
        PIDFILE.unlink(missing_ok=True)


# -- the worker -----------------------------------------------------------------------------------


def worker_env(args: argparse.Namespace) -> dict[str, str]:
    env = common.child_env(BENCH_PEERS_DB=args.db, BENCH_PEERS_SYSTEM="celery",
                           BENCH_PEERS_BROKER=args.broker, BENCH_PEERS_PREFETCH=str(args.prefetch),
                           BENCH_PEERS_WORKLOAD=args.workload)
    if args.workload == "django":
        env["BENCH_PEERS_DJANGO"] = "1"
    else:
        # Without it Celery's Django fixup stays off (no connection checks around each task).
        env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def worker_cmd(args: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "celery", "--quiet", "-A", "benchmarks.peers.tasks_celery",
            "worker", "--pool", args.pool, "--concurrency", str(args.concurrency),
            "--loglevel", "WARNING",
            "--without-gossip", "--without-mingle", "--without-heartbeat", "-Q", QUEUE]


def reset(args: argparse.Namespace) -> None:
    redis_client(args.broker).flushdb()
    if args.workload == "django":
        common.execute(args.db, "TRUNCATE ultjobs_bench_peers_peersrecord RESTART IDENTITY")


def bulk_enqueue(args: argparse.Namespace) -> float:
    from benchmarks.peers import tasks_celery as t

    task = {"noop": t.peers_noop, "io-sync": t.peers_io_sync, "django": t.peers_django}[
        args.workload]
    started = time.perf_counter()
    with t.app.producer_or_acquire() as producer:
        for seq in range(args.jobs):
            task.apply_async((seq,) if args.workload == "django" else (), producer=producer)
    return args.jobs / (time.perf_counter() - started)


def drain(args: argparse.Namespace) -> dict[str, float]:
    client = redis_client(args.broker)
    proc = subprocess.Popen(worker_cmd(args), cwd=common.REPO, env=worker_env(args),
                            stdout=sys.stderr)
    deadline = time.monotonic() + max(300.0, args.jobs / 50)
    span = None
    with common.CpuMeter(proc.pid, descendants=True) as meter:
        try:
            while span is None or span.done < args.jobs:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Celery drain: {span.done if span else 0} of "
                                       f"{args.jobs} done when the wait ended")
                time.sleep(0.05)
                span = celery_timings.merge(client.hvals(celery_timings.KEY))
        finally:
            common.stop_worker(proc)
    if span.done != args.jobs:
        raise RuntimeError(f"Celery drain: {span.done} tasks ran of {args.jobs}")
    return common.drain_figures(args.jobs, span.start, span.end, meter)


def single_enqueue_ms(args: argparse.Namespace) -> float:
    from benchmarks.peers.tasks_celery import peers_noop

    return common.time_single_enqueues(peers_noop.delay)


def pickup(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.peers.tasks_celery import peers_ping

    reset(args)
    probe = common.PickupProbe()
    proc = subprocess.Popen(worker_cmd(args), cwd=common.REPO, env=worker_env(args),
                            stdout=sys.stderr)

    def enqueue(seq: int) -> float:
        peers_ping.delay(seq, probe.port)  # returns once Redis has the message
        return time.monotonic()

    try:
        return common.measure_pickup(enqueue, probe, args.samples)
    finally:
        common.stop_worker(proc)
        probe.close()


def main() -> None:
    args = parse_args(sys.argv[1:])
    os.environ["BENCH_PEERS_BROKER"] = args.broker  # read when tasks_celery is imported
    result: dict[str, Any] = {}
    if args.phase == "setup":
        result = choose_broker()
        common.create_database(args.db)
        # The Django-shaped job's table, in a database of Celery's own.
        subprocess.run([sys.executable, "-m", "django", "migrate", "--run-syncdb", "-v", "0"],
                       cwd=common.REPO, check=True,
                       env=common.child_env(BENCH_PEERS_DB=args.db, BENCH_PEERS_SYSTEM="celery"))
        result["version"] = common.dist_version("celery")
    elif args.phase == "drain":
        reset(args)
        result["bulk"] = bulk_enqueue(args)
        result.update(drain(args))
    elif args.phase == "single":
        reset(args)
        result["single_commit_ms"] = single_enqueue_ms(args)
    elif args.phase == "pickup":
        result = pickup(args)
    elif args.phase == "teardown":
        teardown_broker(args.broker)
        common.drop_database(args.db)
    common.emit(result)


if __name__ == "__main__":
    common.exit_on_sigterm()
    main()
