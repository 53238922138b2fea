"""What every system's module shares: databases, the pickup probe, statistics, the child protocol.

Each system is measured in a child process of its own (``python -m benchmarks.peers.<module>``)
that creates a fresh database, measures, drops it, and prints one ``RESULT {json}`` line that the
runner (``python -m benchmarks.peers``) reads.

The idle pickup clock: the enqueuing process reads ``time.monotonic()`` right after its
transaction's COMMIT returns; the job body's first line reads ``time.monotonic()`` and sends it in
a UDP datagram on the loopback to the enqueuer. On Linux ``time.monotonic()`` is
``CLOCK_MONOTONIC``, one clock for every process on the machine, so the two readings subtract.
"""

from __future__ import annotations

import json
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent

PG_HOST = os.environ.get("ULTJOBS_PG_HOST", "127.0.0.1")
PG_PORT = os.environ.get("ULTJOBS_PG_PORT", "5432")
PG_USER = os.environ.get("ULTJOBS_PG_USER", "postgres")
PG_PASSWORD = os.environ.get("ULTJOBS_PG_PASSWORD", "")

#: Bulk enqueues are sent in chunks of this many jobs, in one transaction, by every system.
BULK_CHUNK = 5_000
#: What each system's module can be asked to do, one phase per process (see ``ours``).
PHASES = ("setup", "drain", "single", "pickup", "teardown")
#: Single enqueues timed per system (median reported).
SINGLE_ENQUEUES = 300
#: What each job of a drain does: ``noop`` returns; ``io-sync`` sleeps ``IO_SECONDS`` in its
#: thread; ``io-async`` awaits ``asyncio.sleep(IO_SECONDS)``; ``django`` one ORM insert and one
#: ORM read.
WORKLOADS = ("noop", "io-sync", "io-async", "django")
#: Ours only (``benchmarks.ab``): ``mix`` interleaves short uncapped bodies with long ones of a
#: kind capped fleet-wide, as a site with one throttled integration runs.
OURS_WORKLOADS = (*WORKLOADS, "mix")
#: How long an I/O-bound job waits (50 ms: a call to another service).
IO_SECONDS = 0.05
#: The mix: one job in ``MIX_EVERY`` is the capped kind (``MIX_CAP`` slots, ``MIX_LONG_SECONDS``
#: each); the rest wait ``MIX_SHORT_SECONDS``.
MIX_EVERY = 10
MIX_CAP = 8
MIX_LONG_SECONDS = 0.1
MIX_SHORT_SECONDS = 0.005


# -- databases ----------------------------------------------------------------------------------


def dsn(dbname: str) -> str:
    """A libpq URL for ``dbname`` on the benchmark's server."""
    auth = PG_USER + (f":{PG_PASSWORD}" if PG_PASSWORD else "")
    return f"postgresql://{auth}@{PG_HOST}:{PG_PORT}/{dbname}"


def _admin_execute(*statements: str) -> None:
    import psycopg

    with psycopg.connect(dsn("postgres"), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def create_database(name: str) -> None:
    """Drop ``name`` if a previous run left it behind, then create it empty."""
    _check_own_name(name)
    _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')


def database_exists(name: str) -> bool:
    """Whether a database ``name`` is on the benchmark's server."""
    return bool(scalar("postgres", "SELECT count(*) FROM pg_database WHERE datname = %s",
                       [name]))


def drop_database(name: str) -> None:
    _check_own_name(name)
    _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _check_own_name(name: str) -> None:
    # The benchmark drops what it creates and nothing else: every database it touches is named
    # ultjobs_peers_<something>.
    if not name.startswith("ultjobs_peers_") or not name.replace("_", "").isalnum():
        raise SystemExit(f"refusing to create or drop database {name!r}: not ultjobs_peers_*")


def server_facts() -> dict[str, Any]:
    """What the report says about the server: version and the settings that move the figures."""
    import psycopg

    with psycopg.connect(dsn("postgres"), autocommit=True) as conn:
        facts = {"server_version": conn.execute("SHOW server_version").fetchone()[0]}
        for name in ("synchronous_commit", "fsync", "shared_buffers", "max_connections",
                     "autovacuum"):
            facts[name] = conn.execute(f"SHOW {name}").fetchone()[0]
    return facts


def scalar(dbname: str, sql: str, params: Sequence[Any] = ()) -> Any:
    """One value from a fresh connection (used after a worker process has exited)."""
    import psycopg

    with psycopg.connect(dsn(dbname), autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


def execute(dbname: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(dsn(dbname), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


# -- the pickup probe ---------------------------------------------------------------------------


def send_started(seq: int, port: int) -> None:
    """A job body's FIRST line: tell the enqueuer, on the shared clock, that the body started."""
    started = time.monotonic()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(f"{seq} {started!r}".encode(), ("127.0.0.1", port))


class PickupProbe:
    """The enqueuer's end: a UDP socket on the loopback that job bodies report their start to."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()

    def wait(self, seq: int, timeout: float) -> float | None:
        """The monotonic time body ``seq`` started at, or None after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(256)
            except TimeoutError:
                return None
            got, started = data.decode().split()
            if int(got) == seq:
                return float(started)
            # A datagram from an earlier (timed-out or warm-up) ping: ignore it.


def measure_pickup(
    enqueue: Callable[[int], float],
    probe: PickupProbe,
    samples: int,
    *,
    gap: tuple[float, float] = (0.02, 0.07),
    warmup_timeout: float = 90.0,
    sample_timeout: float = 10.0,
) -> dict[str, Any]:
    """Enqueue ``samples`` pings one at a time with the worker idle; latencies in ms.

    ``enqueue(seq)`` enqueues ping ``seq`` in a transaction of its own and returns
    ``time.monotonic()`` read right after the COMMIT returned. Between samples the enqueuer
    sleeps a random gap, so a polling worker is caught at a random phase of its poll.
    """
    # Warm-up: the worker is ready once a ping round-trips (process start, LISTEN in place).
    deadline = time.monotonic() + warmup_timeout
    seq = -1
    while True:
        enqueue(seq)
        if probe.wait(seq, min(5.0, max(0.1, deadline - time.monotonic()))) is not None:
            break
        if time.monotonic() > deadline:
            raise SystemExit("pickup: the worker never started a warm-up job")
        seq -= 1
    time.sleep(0.3)
    latencies: list[float] = []
    lost = 0
    for seq in range(samples):
        time.sleep(random.uniform(*gap))
        committed = enqueue(seq)
        started = probe.wait(seq, sample_timeout)
        if started is None:
            lost += 1
            continue
        latencies.append((started - committed) * 1000.0)
    return {"samples": len(latencies), "lost": lost, **percentiles(latencies),
            "latencies_ms": [round(ms, 4) for ms in latencies]}


def pooled_pickup(blocks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One system's pickup blocks as one figure: the percentiles of all their samples, and each
    block's p50 and p99 (their spread shows what one block alone could have read)."""
    latencies = [ms for block in blocks for ms in block["latencies_ms"]]
    return {"samples": len(latencies), "lost": sum(block["lost"] for block in blocks),
            **percentiles(latencies), "blocks": len(blocks),
            "block_p50_ms": [block["p50_ms"] for block in blocks],
            "block_p99_ms": [block["p99_ms"] for block in blocks]}


# -- statistics ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100), nearest-rank on the sorted values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def percentiles(latencies_ms: Sequence[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(latencies_ms, 50),
        "p90_ms": percentile(latencies_ms, 90),
        "p99_ms": percentile(latencies_ms, 99),
        "max_ms": max(latencies_ms) if latencies_ms else math.nan,
        "mean_ms": statistics.fmean(latencies_ms) if latencies_ms else math.nan,
    }


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def time_single_enqueues(enqueue_one: Callable[[], None], count: int = SINGLE_ENQUEUES) -> float:
    """Median ms of ``count`` calls of ``enqueue_one`` (each commits its own transaction)."""
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        enqueue_one()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1000.0


# -- the child protocol ---------------------------------------------------------------------------


def log(message: str) -> None:
    """Progress for the person watching (stderr; stdout carries the RESULT line)."""
    # Through tqdm: on a terminal the progress bar is lifted, the line written, the bar redrawn.
    from tqdm import tqdm

    tqdm.write(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr)


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so ``finally`` blocks stop the workers this process started
    (and drop its databases) when the run is interrupted."""
    import signal

    def handle(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)


def emit(result: dict[str, Any]) -> None:
    print("RESULT " + json.dumps(result), flush=True)


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process: the repository importable, settings for Django."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.peers.settings")
    env.update(extra)
    return env


def run_child(module: str, args: Sequence[str], env: dict[str, str] | None = None
              ) -> dict[str, Any]:
    """Run ``python -m module args`` and return the dict it printed as ``RESULT``."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, env=env or child_env(),
        stdout=subprocess.PIPE, text=True,
    )
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
        else:
            print(line, file=sys.stderr)
    if proc.returncode != 0 or result is None:
        raise RuntimeError(f"{module} failed (exit {proc.returncode})")
    return result


class CpuMeter:
    """CPU per job on each side of a drain: the worker process's, and the rest of the machine's.

    Jobs/s says how fast; this says where each system's cost lies: in its worker process (Python)
    or in the database (every other busy CPU on the machine while the drain runs: PostgreSQL's
    backends, walwriter and checkpointer; the benchmark itself is idle meanwhile). It moves with
    the shared machine's speed as jobs/s does, so compare systems within one run.

    A thread reads ``/proc/stat`` and the worker's ``/proc/<pid>/stat`` every ``INTERVAL``
    seconds while the worker runs; ``per_job`` interpolates both counters at the drain's first
    start and last completion, read from the database (the same host clock). Linux only: elsewhere
    it measures nothing and ``per_job`` returns no figures.
    """

    INTERVAL = 0.02

    def __init__(self, pid: int, *, descendants: bool = False) -> None:
        self.pid = pid
        #: Also count the CPU of the process's children and theirs (Celery's prefork pool runs
        #: the bodies in child processes).
        self.descendants = descendants
        self._ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        #: (wall time, busy CPU seconds of the machine, CPU seconds of the worker process)
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)

    def __enter__(self) -> CpuMeter:
        if Path("/proc/stat").exists():
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _read(self) -> tuple[float, float, float] | None:
        try:
            with open("/proc/stat") as f:
                # user nice system idle iowait irq softirq steal ...: busy is ours to spend,
                # so idle, iowait and steal (another tenant's) are left out.
                user, nice, system, _idle, _iowait, irq, softirq = map(
                    int, f.readline().split()[1:8])
            worker_ticks = _process_ticks(self.pid, missing_ok=False) + sum(
                _process_ticks(pid) for pid in self._pids()[1:])
        except (OSError, ValueError):
            return None
        busy = (user + nice + system + irq + softirq) / self._ticks
        return time.time(), busy, worker_ticks / self._ticks

    def _pids(self) -> list[int]:
        pids = [self.pid]
        if self.descendants:
            for pid in pids:  # grows as children are found: a breadth-first walk
                pids.extend(_children(pid))
        return pids

    def _run(self) -> None:
        while not self._stop.is_set():
            sample = self._read()
            if sample is not None:
                self.samples.append(sample)
            self._stop.wait(self.INTERVAL)

    def _at(self, when: float) -> tuple[float, float] | None:
        """Both counters at ``when`` (linear between the samples around it)."""
        for (t0, b0, w0), (t1, b1, w1) in zip(self.samples, self.samples[1:], strict=False):
            if t0 <= when <= t1:
                share = (when - t0) / (t1 - t0) if t1 > t0 else 0.0
                return b0 + (b1 - b0) * share, w0 + (w1 - w0) * share
        return None

    def per_job(self, start: float, end: float, jobs: int) -> dict[str, float]:
        """``worker_cpu_us`` and ``db_cpu_us`` per job between two epoch times ({} if unknown)."""
        first, last = self._at(start), self._at(end)
        if first is None or last is None or jobs <= 0:
            return {}
        busy, worker = last[0] - first[0], last[1] - first[1]
        return {"worker_cpu_us": worker / jobs * 1e6,
                "db_cpu_us": max(0.0, busy - worker) / jobs * 1e6}


def ideal_io_rate(concurrency: int, seconds: float = IO_SECONDS) -> float:
    """Jobs/s of ``concurrency`` waits of ``seconds`` each, back to back with no overhead."""
    return concurrency / seconds


def _process_ticks(pid: int, *, missing_ok: bool = True) -> int:
    """utime + stime of one process, in clock ticks (0 for a child that has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        if not missing_ok:
            raise
        return 0
    return int(fields[11]) + int(fields[12])


def _children(pid: int) -> list[int]:
    children: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return children


def drain_figures(jobs: int, start: float, end: float, meter: CpuMeter) -> dict[str, float]:
    """A drain's jobs/s and seconds between its first start and last completion (epoch times
    from the database), with each side's CPU per job when the meter has them."""
    seconds = end - start
    return {"jobs_per_s": jobs / seconds, "seconds": seconds, **meter.per_job(start, end, jobs)}


def wait_or_kill(proc: subprocess.Popen, timeout: float, what: str) -> int:
    """Wait for a worker process; kill it (and say so) if it overstays ``timeout`` seconds."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{what} did not finish within {timeout:.0f}s; killed") from None


def stop_worker(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM a continuous worker and wait for its graceful exit (kill after ``timeout``)."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def dist_version(dist: str) -> str:
    """The installed version of a distribution (for the report's version column)."""
    from importlib.metadata import version

    return version(dist)
