"""The wake-up alone (performance.md item 92): a NOTIFY's commit → the claiming thread's first
statement sent, and that statement's time, two ways in one process, rounds interleaved:

* ``thread``: a listener thread on a session of its own (psycopg's ``notifies()``) sets a
  ``threading.Event`` the claiming thread waits on; the statement goes out on another session
  (how the worker did it before item 92);
* ``wakeup``: the claiming thread LISTENs on its own session and waits in ``Wakeup.wait``; the
  statement goes out on the session that received the notification (how it does it now).

    python -m benchmarks.pickup_wake [--samples 400]

The statement is ``SELECT 1``: what is measured is the path and the session, not the claim.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from collections.abc import Callable

import django
import psycopg

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

from benchmarks.peers import common  # noqa: E402
from django_ultjobs.worker.wakeup import Wakeup  # noqa: E402

DSN = (f"host={common.PG_HOST} port={common.PG_PORT} user={common.PG_USER} dbname=postgres"
       + (f" password={common.PG_PASSWORD}" if common.PG_PASSWORD else ""))
Woken = list[tuple[int, int]]


def _session() -> psycopg.Connection:
    conn = psycopg.connect(DSN, autocommit=True)
    conn.execute("LISTEN pickup_wake")
    return conn


def thread_way(woken: Woken, stop: threading.Event) -> list[psycopg.Connection]:
    listening, claiming = _session(), psycopg.connect(DSN, autocommit=True)
    event = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            for _ in listening.notifies(timeout=0.5, stop_after=64):
                event.set()

    def claim() -> None:
        while not stop.is_set():
            if event.wait(0.5):
                event.clear()
                _timed(claiming, woken)

    for target in (listen, claim):
        threading.Thread(target=target, daemon=True).start()
    return [listening, claiming]


def wakeup_way(woken: Woken, stop: threading.Event) -> list[psycopg.Connection]:
    conn, wakeup = _session(), Wakeup()
    conn.add_notify_handler(lambda _: wakeup.set())
    wakeup.watch(conn.pgconn, lambda: True)

    def claim() -> None:
        while not stop.is_set():
            if wakeup.wait(0.5):
                wakeup.clear()
                _timed(conn, woken)

    threading.Thread(target=claim, daemon=True).start()
    return [conn]


def _timed(conn: psycopg.Connection, woken: Woken) -> None:
    started = time.monotonic_ns()
    conn.execute("SELECT 1")
    woken.append((started, time.monotonic_ns()))


def _percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.pickup_wake")
    p.add_argument("--samples", type=int, default=400)
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args()
    ways: dict[str, Callable[[Woken, threading.Event], list[psycopg.Connection]]] = {
        "thread": thread_way, "wakeup": wakeup_way}
    path: dict[str, list[float]] = {name: [] for name in ways}
    statement: dict[str, list[float]] = {name: [] for name in ways}
    sender = psycopg.connect(DSN, autocommit=True)
    for r in range(args.rounds):
        for name in (list(ways) if r % 2 else list(ways)[::-1]):
            woken: Woken = []
            stop = threading.Event()
            conns = ways[name](woken, stop)
            time.sleep(0.3)
            for _ in range(args.samples // args.rounds):
                time.sleep(random.uniform(0.02, 0.04))
                before = len(woken)
                sender.execute("NOTIFY pickup_wake, 'x'")
                committed = time.monotonic_ns()
                deadline = time.monotonic() + 2
                while len(woken) == before and time.monotonic() < deadline:
                    time.sleep(0.0002)
                if len(woken) > before:
                    started, done = woken[-1]
                    path[name].append((started - committed) / 1e6)
                    statement[name].append((done - started) / 1e6)
            stop.set()
            time.sleep(0.6)
            for conn in conns:
                conn.close()
    for name in ways:
        print(f"{name}: commit → statement sent p50 {_percentile(path[name], 50):.3f} "
              f"p90 {_percentile(path[name], 90):.3f} p99 {_percentile(path[name], 99):.3f} ms; "
              f"statement p50 {_percentile(statement[name], 50):.3f} "
              f"p99 {_percentile(statement[name], 99):.3f} ms (n={len(path[name])})")


if __name__ == "__main__":
    main()
