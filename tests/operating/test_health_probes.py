"""The health probes of a real ``runjobworker --health-port`` process, on both engines: readiness
from start-up to drain, liveness lost to a heartbeat or a claim loop blocked on a lock the test
holds (a real outage, not a hook), and nothing served but the two probes
(rules 121 (probe-alive), 122 (probe-ready) and 123 (probes-only)). Every wait is on the
process's answers, its output or its exit."""

from __future__ import annotations

import http.client
import re
import signal
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from django.db import connections

from django_ultjobs.models import Job, Worker
from tests.conftest import WorkerProcesses, wait_until
from tests.testapp.jobs import block_until
from tests.testapp.models import RunLog

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]

#: Heartbeat every 0.5 s: the heartbeat's bound is 1.5 s, the database's 1 s, a claim round's
#: 0.9 s (its longest wait, the 0.4 s backoff should its claim fail, plus a heartbeat interval).
FLAGS = ("--visibility-timeout", "10", "--heartbeat-interval", "0.5", "--poll-interval", "0.1",
         "--grace-period", "120", "--health-port", "0")


def probe(port: int, path: str, method: str = "GET") -> tuple[int, str]:
    """The status and body of one request to the worker's health server."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def health_port(procs: WorkerProcesses) -> int:
    """The port the worker's log says it listens on (``--health-port 0`` lets it pick)."""
    found = wait_until(lambda: re.search(r"jobs\.worker\.health-listening .*port=(\d+)",
                                         procs.logs()), 30, message="the health-listening line")
    return int(found.group(1))


def answers(port: int, path: str, status: int) -> str:
    """Wait until ``path`` answers ``status``; its body."""
    seen: list[tuple[int, str]] = []

    def check() -> bool:
        seen.append(probe(port, path))
        return seen[-1][0] == status

    wait_until(check, 30, interval=0.05, message=f"{path} {status} (last: {seen[-1:]})")
    return seen[-1][1]


@contextmanager
def table_locked(alias: str, table: str) -> Iterator[None]:
    """Hold a lock the worker's statements on ``table`` wait for, from a connection of the
    test's own: the whole database on SQLite (an exclusive transaction), the table on
    PostgreSQL."""
    settings = connections[alias].settings_dict
    if connections[alias].vendor == "sqlite":
        conn = sqlite3.connect(settings["NAME"], isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    with psycopg.connect(dbname=settings["NAME"], host=settings["HOST"] or None,
                         port=settings["PORT"] or None, user=settings["USER"] or None,
                         password=settings["PASSWORD"] or None) as conn:
        conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        yield
        conn.rollback()


def test_ready_after_registering_not_alive_while_the_heartbeat_is_blocked(
        alias: str, worker_processes: WorkerProcesses) -> None:
    # rule 122 (probe-ready): 503 while the start-up waits for the database, 200 once registered.
    with table_locked(alias, Worker._meta.db_table):
        worker_processes.start(alias, *FLAGS)
        port = health_port(worker_processes)
        assert probe(port, "/readyz") == (503, "starting: the worker is not registered yet\n")
        assert probe(port, "/livez") == (200, "ok\n")
    answers(port, "/readyz", 200)
    assert Worker.objects.using(alias).count() == 1

    # rule 121 (probe-alive): a heartbeat blocked on a lock is not alive, and not ready.
    with table_locked(alias, Worker._meta.db_table):
        reason = answers(port, "/livez", 503)
        assert re.fullmatch(r"(heartbeat: no beat|claim loop: no round) for [\d.]+ s "
                            r"\(bound [\d.]+ s\)\n", reason), reason
        if alias == "postgres":  # only the workers table is locked: the claims go on
            assert reason.startswith("heartbeat: no beat for"), reason
        status, why = probe(port, "/readyz")
        assert status == 503 and why.startswith(("heartbeat:", "claim loop:", "database:")), why
    # Back once the lock is gone, without a restart.
    answers(port, "/livez", 200)
    answers(port, "/readyz", 200)


def test_not_alive_while_the_claim_loop_is_blocked(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:
    """rule 121 (probe-alive): a claim statement waiting on a lock of the jobs table stops the
    rounds, while the heartbeat (no run in flight: the workers table only) beats on."""
    worker_processes.start(pg_alias, *FLAGS)
    port = health_port(worker_processes)
    answers(port, "/readyz", 200)
    with table_locked(pg_alias, Job._meta.db_table):
        reason = answers(port, "/livez", 503)
        assert re.fullmatch(r"claim loop: no round for [\d.]+ s \(bound 0\.9 s\)\n", reason), \
            reason
        assert probe(port, "/readyz")[0] == 503
    answers(port, "/livez", 200)


def test_a_database_outage_makes_the_worker_unready_not_dead(
        pg_alias: str, worker_processes: WorkerProcesses) -> None:
    """rules 121 (probe-alive) and 122 (probe-ready): the database refuses the worker's every
    connection (its own connections cut, new ones refused): unready at the first failed
    heartbeat, alive all along (each failure is a round, a beat), ready again once it is back."""
    worker_processes.start(pg_alias, *FLAGS)
    port = health_port(worker_processes)
    answers(port, "/readyz", 200)
    settings = connections[pg_alias].settings_dict
    with connections[pg_alias].cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        (own,) = cur.fetchone()
    name = settings["NAME"]
    with psycopg.connect(dbname="postgres", host=settings["HOST"] or None,
                         port=settings["PORT"] or None, user=settings["USER"] or None,
                         password=settings["PASSWORD"] or None, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> %s", (name, own))
            reason = answers(port, "/readyz", 503)
            assert reason.startswith("database: the heartbeat failed "), reason
            # Past every bound (heartbeat 1.5 s, claim round 0.9 s, then the backoff's).
            until = time.monotonic() + 5.0
            while time.monotonic() < until:
                assert probe(port, "/livez") == (200, "ok\n")
                time.sleep(0.1)
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    answers(port, "/readyz", 200)
    assert probe(port, "/livez") == (200, "ok\n")


def test_not_ready_while_draining_and_gone_with_the_worker(
        alias: str, worker_processes: WorkerProcesses, tmp_path: Path) -> None:
    """rule 122 (probe-ready): SIGTERM with a run in flight makes the worker unready at once,
    still alive while it drains; rule 123 (probes-only): the server stops with the process."""
    release = tmp_path / "release"
    job_id = block_until.enqueue(str(release), label="probe-drain").id
    proc = worker_processes.start(alias, *FLAGS)
    port = health_port(worker_processes)
    wait_until(lambda: RunLog.objects.using(alias).filter(job_id=job_id).exists(), 30,
               message="the job running")
    assert probe(port, "/readyz") == (200, "ok\n")

    proc.send_signal(signal.SIGTERM)
    assert answers(port, "/readyz", 503) == "draining: the worker is stopping\n"
    assert probe(port, "/livez") == (200, "ok\n")
    release.touch()
    assert proc.wait(30) == 0, worker_processes.logs()
    assert Job.objects.using(alias).get(id=job_id).status == "succeeded"
    with pytest.raises(ConnectionRefusedError):
        probe(port, "/livez")


def test_nothing_but_the_probes_is_served(alias: str, worker_processes: WorkerProcesses) -> None:
    """rule 123 (probes-only): another path is 404, another method 405, and no request is
    logged."""
    worker_processes.start(alias, *FLAGS)
    port = health_port(worker_processes)
    answers(port, "/readyz", 200)
    assert probe(port, "/livez?verbose=1") == (200, "ok\n")
    assert probe(port, "/other") == (
        404, "not found: /other (this server answers /livez and /readyz)\n")
    assert probe(port, "/livez/")[0] == 404
    for method in ("POST", "DELETE", "BREW"):
        assert probe(port, "/livez", method) == (
            405, f"method {method} not allowed: the probes answer GET\n")
    assert probe(port, "/livez", "HEAD")[0] == 405
    assert "/other" not in worker_processes.logs()
    assert "HTTP/1" not in worker_processes.logs()


def test_a_port_in_use_fails_the_start_in_one_line(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """rule 123 (probes-only), rule 18 (start-mistake-named): the port is named, nothing is
    registered, no traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = worker_processes.start(alias, *FLAGS[:-1], str(port))
        assert proc.wait(60) == 1
    logs = worker_processes.logs()
    assert f"--health-port {port}: 127.0.0.1:{port} is in use by another process" in logs, logs
    assert "Traceback" not in logs, logs
    assert not Worker.objects.using(alias).exists()
