"""Starting a worker: bad flags are refused by name, and a database that is not there yet is
waited for (``--connect-timeout``) and reported in one line, never a traceback.

The database failures are real: a port where nothing listens, a database that does not exist,
an empty database with no tables, a TCP proxy that starts forwarding to PostgreSQL only after
the worker has tried a few times, and an SQLite file another connection holds a read
transaction on while the worker wants to switch it to WAL, and a database migrated only up to
an older version of the tables.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections

from django_ultjobs.management.commands import runjobworker
from django_ultjobs.models import Job
from django_ultjobs.worker.options import WorkerOptions
from tests.conftest import REPO, wait_until, worker_command, worker_env
from tests.testapp.jobs import add

UNAVAILABLE = "jobs.worker.database-unavailable"


# -- defect: non-finite and absurd flags ---------------------------------------------------------


#: Each float flag with values that must be refused at start: not numbers, infinite, or so large
#: that a sleep or a timedelta built from them overflows.
BAD_SECONDS = ("nan", "inf", "-inf", "1e300", "1e12")
FLOAT_FLAGS = ("--visibility-timeout", "--heartbeat-interval", "--poll-interval",
               "--grace-period", "--connect-timeout")


class _NotStarted(Exception):
    pass


@pytest.fixture
def no_worker_may_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any option that gets past the checks fails the test at once instead of running."""
    class Refuse:
        def __init__(self, options: WorkerOptions) -> None:
            raise _NotStarted(f"the worker was built with {options!r}")

    monkeypatch.setattr(runjobworker, "WorkerProcess", Refuse)


@pytest.mark.parametrize("flag", FLOAT_FLAGS)
@pytest.mark.parametrize("value", BAD_SECONDS)
def test_a_float_flag_that_is_not_a_sane_number_is_refused_by_name(
        no_worker_may_start: None, flag: str, value: str) -> None:
    with pytest.raises(CommandError) as refused:
        call_command("runjobworker", f"{flag}={value}")  # "-inf" reads as a flag otherwise
    message = str(refused.value)
    assert f"{flag} must be" in message, message
    assert "\n" not in message


def test_the_documented_maxima_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[WorkerOptions] = []

    class Record:
        def __init__(self, options: WorkerOptions) -> None:
            built.append(options)

        def run(self) -> int:
            return 0

    monkeypatch.setattr(runjobworker, "WorkerProcess", Record)
    call_command("runjobworker", "--visibility-timeout", "86400", "--heartbeat-interval",
                 "43200", "--poll-interval", "86400", "--grace-period", "86400",
                 "--connect-timeout", "86400")
    call_command("runjobworker", "--connect-timeout", "0", "--grace-period", "0")
    assert built[0].visibility_timeout == 86400 and built[1].connect_timeout == 0


@pytest.mark.parametrize("field", ["visibility_timeout", "heartbeat_interval", "poll_interval",
                                   "grace_period", "cancel_wait", "connect_timeout"])
def test_worker_options_built_from_code_refuse_non_finite_seconds(field: str) -> None:
    with pytest.raises(Exception, match="must be") as refused:
        WorkerOptions(**{field: float("nan")})
    assert field.replace("_", "-") in str(refused.value)


# -- defect: a worker starting while its database is not there -----------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_worker(alias: str, *flags: str, env: dict[str, str], tmp_path: Path
               ) -> subprocess.CompletedProcess[str]:
    # Its own directory for SQLite files, so a suffix of a test's own leaves none behind.
    env = {"ULTJOBS_TEST_TMP": str(tmp_path), **env}
    return subprocess.run(worker_command(alias, *flags), env={**worker_env(alias), **env},
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def assert_one_line_refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The process failed with exit 1 and one ``CommandError:`` line, no traceback."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("CommandError")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def tries(output: str) -> list[str]:
    return [line for line in output.splitlines() if UNAVAILABLE in line]


def test_nothing_listening_is_retried_then_refused_in_one_line(tmp_path: Path) -> None:
    port = free_port()
    result = run_worker("postgres", "--burst", "--connect-timeout", "2",
                        env={"ULTJOBS_PG_PORT": str(port)}, tmp_path=tmp_path)
    error = assert_one_line_refusal(result)
    assert "'postgres'" in error and "--connect-timeout" in error, error
    assert str(port) in error  # the driver's own reason, on the same line
    lines = tries(result.stderr)
    assert len(lines) >= 2, result.stderr  # waited, one line per try
    assert all("tries=" in line and "retry_in=" in line for line in lines), lines


def test_sigterm_during_the_wait_stops_the_worker_cleanly(worker_processes: Any) -> None:
    proc = worker_processes.start("postgres", "--connect-timeout", "600",
                                  env={"ULTJOBS_PG_PORT": str(free_port())})
    wait_until(lambda: tries(worker_processes.logs()) or proc.poll() is not None,
               timeout=30, message="a failed try")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, worker_processes.logs()
    assert "Traceback" not in worker_processes.logs()


def test_connect_timeout_zero_fails_at_once(tmp_path: Path) -> None:
    result = run_worker("postgres", "--burst", "--connect-timeout", "0",
                        env={"ULTJOBS_PG_PORT": str(free_port())}, tmp_path=tmp_path)
    assert_one_line_refusal(result)
    assert tries(result.stderr) == []


def test_a_misnamed_database_is_named_and_waited_for(tmp_path: Path) -> None:
    result = run_worker("postgres", "--burst", "--connect-timeout", "1",
                        env={"ULTJOBS_TEST_DB_SUFFIX": "_hstartup_missing"}, tmp_path=tmp_path)
    error = assert_one_line_refusal(result)
    assert 'database "test_ultjobs_hstartup_missing" does not exist' in error, error
    assert tries(result.stderr), result.stderr


def admin_connection() -> psycopg.Connection[Any]:
    settings = connections["postgres"].settings_dict
    return psycopg.connect(host=settings["HOST"], port=settings["PORT"] or 5432,
                           user=settings["USER"], dbname="postgres", autocommit=True)


@pytest.fixture
def empty_pg_database() -> Iterator[str]:
    """An empty PostgreSQL database of this test's own, dropped after."""
    suffix = f"{os.environ.get('ULTJOBS_TEST_DB_SUFFIX', '')}_empty"
    name = f"test_ultjobs{suffix}"
    with admin_connection() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield suffix
    finally:
        with admin_connection() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_an_unmigrated_database_says_run_migrate_at_once(
        engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if engine == "postgres":
        env = {"ULTJOBS_TEST_DB_SUFFIX": request.getfixturevalue("empty_pg_database")}
        alias = "postgres"
    else:
        # A file no one migrated (SQLite creates it empty on connect).
        env = {"ULTJOBS_TEST_TMP": str(tmp_path), "ULTJOBS_TEST_DB_SUFFIX": "_hstartup_empty"}
        alias = "default"
    result = run_worker(alias, "--burst", "--connect-timeout", "30", env=env, tmp_path=tmp_path)
    error = assert_one_line_refusal(result)
    assert "tables do not exist" in error and "manage.py migrate" in error, error
    assert f"'{alias}'" in error, error
    # Not waited for: no deploy step creates the tables while a worker waits.
    assert tries(result.stderr) == [], result.stderr


def test_a_database_with_array_nulls_off_is_refused_at_once(
        empty_pg_database: str, tmp_path: Path) -> None:
    # The settle's arrays write a missing value as NULL, which PostgreSQL reads as the text
    # 'NULL' with array_nulls off: refused before the worker registers, not waited for.
    with admin_connection() as conn:
        conn.execute(f'ALTER DATABASE "test_ultjobs{empty_pg_database}" SET array_nulls = off')
    result = run_worker("postgres", "--burst", "--connect-timeout", "30",
                        env={"ULTJOBS_TEST_DB_SUFFIX": empty_pg_database}, tmp_path=tmp_path)
    error = assert_one_line_refusal(result)
    assert "array_nulls is off" in error and "'postgres'" in error, error
    assert tries(result.stderr) == [], result.stderr


class LateProxy:
    """A TCP proxy to PostgreSQL on a port that is closed until ``open()`` is called."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._server: socket.socket | None = None
        self._stop = threading.Event()

    def open(self) -> None:
        server = socket.create_server(("127.0.0.1", self.port))
        server.settimeout(0.2)
        self._server = server
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self._server is not None
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.close()


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_database_that_comes_up_during_the_wait_is_used(
        pg_alias: str, worker_processes: Any) -> None:
    job = add.enqueue(20, 22)
    settings = connections["postgres"].settings_dict
    proxy = LateProxy((settings["HOST"], int(settings["PORT"] or 5432)))
    try:
        proc = worker_processes.start("postgres", "--burst", "--connect-timeout", "60",
                                      env={"ULTJOBS_PG_PORT": str(proxy.port)})
        wait_until(lambda: len(tries(worker_processes.logs())) >= 2, timeout=30,
                   message="two failed tries")
        proxy.open()
        assert proc.wait(60) == 0, worker_processes.logs()
    finally:
        proxy.close()
    row = Job.objects.using("postgres").get(id=job.id)
    assert (row.status, row.result) == ("succeeded", 42)
    assert "jobs.worker.started" in worker_processes.logs()


# -- SQLite: switching a file to WAL while another connection reads --------------------------------


@pytest.mark.django_db(transaction=True)
def test_sqlite_wal_switch_waits_for_a_reader(tmp_path: Path, worker_processes: Any) -> None:
    job = add.enqueue(1, 2)
    # A copy of the migrated test database, in rollback-journal mode, for the worker alone.
    path = tmp_path / "test_ultjobs_hstartup_wal.sqlite3"
    source = sqlite3.connect(connections["default"].settings_dict["NAME"])
    copy = sqlite3.connect(path, isolation_level=None)
    source.backup(copy)
    source.close()
    assert copy.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    copy.execute("BEGIN")
    copy.execute("SELECT count(*) FROM django_ultjobs_job").fetchall()  # holds a read lock
    try:
        proc = worker_processes.start(
            "default", "--burst", "--connect-timeout", "60",
            env={"ULTJOBS_TEST_TMP": str(tmp_path), "ULTJOBS_TEST_DB_SUFFIX": "_hstartup_wal",
                 "ULTJOBS_TEST_SQLITE_BARE": "1"})
        wait_until(lambda: tries(worker_processes.logs()) or proc.poll() is not None,
                   timeout=30, message="a failed try")
        assert proc.poll() is None, worker_processes.logs()
    finally:
        copy.execute("ROLLBACK")
    assert proc.wait(60) == 0, worker_processes.logs()
    failed = tries(worker_processes.logs())
    assert failed and all("database is locked" in line for line in failed), failed
    copy.close()
    after = sqlite3.connect(path)
    assert after.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    status, result = after.execute("SELECT status, result FROM django_ultjobs_job WHERE id = ?",
                                   (job.id,)).fetchone()
    after.close()
    assert (status, result) == ("succeeded", "3")

# -- rule 18 (start-mistake-named): a database that lacks a migration the code needs is refused at
# once ------------ New code deployed before ``migrate`` (here: no ``0008_worker_timeouts``, so the
# worker cannot write its lease timings on its row) is refused in one line that says to run
# ``manage.py migrate``, on both engines, never waited for or shown as a traceback.

#: This run's own suffix and more: two suites on one server (CI and a developer's) must not drop
#: each other's database.
UNMIGRATED_SUFFIX = f"{os.environ.get('ULTJOBS_TEST_DB_SUFFIX', '')}_at_0006"


@pytest.fixture
def pg_database_at_0006() -> Iterator[None]:
    """A PostgreSQL database of this test's own, dropped after."""
    name = f"test_ultjobs{UNMIGRATED_SUFFIX}"
    with admin_connection() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield
    finally:
        with admin_connection() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_a_database_without_the_timings_column_says_run_migrate(
        engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    alias = "default" if engine == "sqlite" else "postgres"
    if engine == "postgres":
        request.getfixturevalue("pg_database_at_0006")
    env = {"ULTJOBS_TEST_TMP": str(tmp_path), "ULTJOBS_TEST_DB_SUFFIX": UNMIGRATED_SUFFIX}
    subprocess.run([sys.executable, "-m", "django", "migrate", "django_ultjobs",
                    "0006_attempt_slot_lost_index", "--database", alias, "-v", "0"],
                   env={**worker_env(alias), **env}, cwd=REPO, check=True, timeout=120)
    result = run_worker(alias, "--burst", "--connect-timeout", "30", env=env, tmp_path=tmp_path)
    error = assert_one_line_refusal(result)
    assert "manage.py migrate" in error, error
    assert tries(result.stderr) == [], result.stderr
