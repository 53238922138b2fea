"""The management commands as a new user meets them: every flag documented and explained, every
refusal naming a flag that exists, and the first mistakes (no ``migrate``, a bad ``DATABASE_URL``,
a misnamed alias, an absurd thread count) reported in one line, never a traceback.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command, load_command_class
from django.core.management.base import CommandError

from django_ultjobs.exceptions import JobConfigurationError
from django_ultjobs.models import Worker
from django_ultjobs.worker.options import MAX_THREADS, WorkerOptions
from tests.conftest import REPO, worker_command, worker_env

WORKER_MD = (REPO / "docs" / "worker.md").read_text()
#: Flags every Django command has; Django documents them.
DJANGO_FLAGS = {"-h", "--help", "--version", "-v", "--verbosity", "--settings", "--pythonpath",
                "--traceback", "--no-color", "--force-color", "--skip-checks"}


def parser_of(name: str) -> ArgumentParser:
    return load_command_class("django_ultjobs", name).create_parser("manage.py", name)


def own_actions(name: str) -> list[Any]:
    return [action for action in parser_of(name)._actions
            if not DJANGO_FLAGS & set(action.option_strings)]


def own_flags(name: str) -> set[str]:
    return {flag for action in own_actions(name) for flag in action.option_strings}


# -- every flag documented and explained ----------------------------------------------------------


def flag_table(text: str) -> set[str]:
    """The flags in the first column of the markdown tables in ``text``."""
    return {flag for line in text.splitlines() if line.startswith("| `-")
            for flag in re.findall(r"`(--?[a-z][a-z-]*)`", line.split("|")[1])}


def test_every_runjobworker_flag_is_in_the_flag_table_of_worker_md() -> None:
    assert own_flags("runjobworker") == flag_table(WORKER_MD.split("## Retention", 1)[0])


def test_every_runjobworker_long_flag_is_in_the_synopsis_of_worker_md() -> None:
    synopsis = WORKER_MD.split("```sh", 1)[1].split("```", 1)[0]
    missing = {f for f in own_flags("runjobworker") if f.startswith("--") and f not in synopsis}
    assert not missing


def test_every_prunejobs_flag_is_in_the_retention_table_of_worker_md() -> None:
    assert own_flags("prunejobs") == flag_table(WORKER_MD.split("## Retention", 1)[1])


@pytest.mark.parametrize("name", ["runjobworker", "prunejobs"])
def test_every_flag_has_a_help_text(name: str) -> None:
    assert all(action.help for action in own_actions(name)), name


# -- refusals name flags that exist ---------------------------------------------------------------


#: A bad value for each WorkerOptions field that has a flag.
BAD_OPTIONS = {
    "queues": ("",), "threads": 0, "visibility_timeout": -1.0, "heartbeat_interval": -1.0,
    "poll_interval": 0.0, "grace_period": -5.0, "cancel_wait": -1.0, "connect_timeout": -1.0,
    "max_jobs": 0, "max_memory": 0.0,
}


@pytest.mark.parametrize("field", sorted(BAD_OPTIONS))
def test_a_refused_option_names_only_flags_that_exist(field: str) -> None:
    with pytest.raises(JobConfigurationError) as refused:
        WorkerOptions(**{field: BAD_OPTIONS[field]})
    named = set(re.findall(r"--[a-z][a-z-]+", str(refused.value)))
    assert named, str(refused.value)
    assert named <= own_flags("runjobworker"), str(refused.value)


def test_grace_period_minus_5_names_only_grace_period() -> None:
    with pytest.raises(CommandError) as refused:
        call_command("runjobworker", "--grace-period=-5")
    assert re.findall(r"--[a-z][a-z-]+", str(refused.value)) == ["--grace-period"]


@pytest.mark.parametrize("command", ["runjobworker", "prunejobs"])
def test_an_unknown_database_alias_names_the_flag(command: str) -> None:
    with pytest.raises(CommandError) as refused:
        call_command(command, "--database", "nope")
    message = str(refused.value)
    assert message.startswith("--database 'nope' is not in settings.DATABASES"), message
    assert "(there: default, postgres)" in message, message
    assert "ULTJOBS" not in message


@pytest.mark.parametrize("threads", [MAX_THREADS + 1, 100_000])
def test_an_absurd_thread_count_is_refused_before_anything_starts(threads: int) -> None:
    with pytest.raises(CommandError, match=rf"--threads must be from 1 to {MAX_THREADS}"):
        call_command("runjobworker", "--threads", str(threads))


def test_the_maximum_thread_count_is_accepted() -> None:
    assert WorkerOptions(threads=MAX_THREADS).threads == MAX_THREADS


# -- a worker whose threads cannot start ----------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_worker_whose_threads_cannot_start_is_marked_stopped(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The system's thread limit, reached half-way through the pool: the worker says so in one
    line, stops the threads it started, and its row reads stopped, not silent
    (rule 17 (failed-start-leaves-no-row))."""
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name == "ultjobs-exec-3":
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(CommandError) as refused:
        call_command("runjobworker", "--database", alias, "--threads", "8",
                     "--worker-id", "thread-limit")
    message = str(refused.value)
    assert "can't start new thread" in message and "--threads" in message, message
    row = Worker.objects.using(alias).get(pk="thread-limit")
    assert row.stopped_at is not None
    monkeypatch.undo()
    assert not [t for t in threading.enumerate() if t.name.startswith("ultjobs-")]


# -- database mistakes in one line, from real processes --------------------------------------------


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python manage.py ...`` of the example project, as a new user runs it."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "example_project.settings", **env}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = without_system_check_report(result.stderr.strip().splitlines())
    assert len(lines) == 1, result.stderr
    return lines[0]


def without_system_check_report(lines: list[str]) -> list[str]:
    """The lines after Django's system check report, which a bare new project (SQLite without
    the settings deployment.md recommends) rightly gets, warnings with their hints, before
    the error itself."""
    if lines and lines[0] == "System check identified some issues:":
        lines = [line for line in lines[1:] if line and not line.startswith(
            ("WARNINGS:", "?: (", "\tHINT:"))]
    return lines


@pytest.mark.parametrize("command", ["runjobworker", "prunejobs"])
def test_a_forgotten_migrate_says_run_migrate(command: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'never-migrated.sqlite3'}"
    flags = ["--burst"] if command == "runjobworker" else []
    error = one_line_error(manage(command, *flags, env={"DATABASE_URL": url}))
    assert "tables do not exist" in error and "python manage.py migrate" in error, error


@pytest.mark.parametrize(("url", "says"), [
    ("postgress://shop:secret@127.0.0.1/shop", "'postgress' is not a database"),
    ("postgres://shop:secret@127.0.0.1:port/shop", "Port could not be cast"),
    ("postgres://127.0.0.1:5432/", "names no database"),
    ("mysql://shop@127.0.0.1/shop", "'mysql' is not a database"),
    ("not a url", "is not a database"),
    ("", "is set but empty"),
])
@pytest.mark.parametrize("command", ["runjobworker", "prunejobs"])
def test_a_bad_database_url_is_one_line_that_says_what_to_write(
        command: str, url: str, says: str) -> None:
    error = one_line_error(manage(command, env={"DATABASE_URL": url}))
    assert error.startswith("DATABASE_URL") and says in error, error
    assert "postgres://USER:PASSWORD@HOST:5432/NAME" in error or "empty" in error, error
    assert "secret" not in error  # the password is never echoed


def test_an_unreachable_database_is_one_line_for_prunejobs() -> None:
    # runjobworker waits for it first (tests/worker/test_startup.py); prunejobs runs from cron.
    error = one_line_error(manage("prunejobs", env={
        "DATABASE_URL": "postgres://postgres@127.0.0.1:1/shop"}))
    assert error.startswith("CommandError: database 'default' cannot be pruned now:"), error
    assert "port 1 failed" in error, error



def test_getting_started_shows_the_middleware_and_logging() -> None:
    text = (REPO / "docs" / "getting-started.md").read_text()
    assert '"django_ultjobs.middleware.EnqueuedByMiddleware"' in text
    assert "LOGGING = {" in text and "--log-format json" in text


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)


def test_getting_started_gives_postgresql_settings_a_worker_can_run_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The PostgreSQL settings of getting-started.md, both forms, as written: the database is
    created first, and the pool holds what a worker at its default --threads uses (psycopg's
    default of 4 serialises the bodies that query, or fails them after 30 s)."""
    text = (REPO / "docs" / "getting-started.md").read_text()
    assert "createdb " in text and "'psycopg[pool]'" in text
    blocks = [b for b in _python_blocks(text) if "postgres" in b and "DATABASES" in b]
    assert len(blocks) == 2, blocks
    monkeypatch.setenv("DATABASE_URL", "postgres://shop:secret@db.internal:5432/shop")
    for block in blocks:
        namespace: dict[str, Any] = {}
        exec(block, namespace)
        database = namespace["DATABASES"]["default"]
        assert database["ENGINE"] == "django.db.backends.postgresql", block
        assert database["OPTIONS"]["pool"]["max_size"] >= 4 + WorkerOptions().threads, block
        assert database["OPTIONS"]["prepare_threshold"] == 5, block
        assert "CONN_MAX_AGE" not in database, block  # Django refuses it beside a pool


def test_a_forgotten_migrate_in_a_new_project_is_the_only_line(tmp_path: Path) -> None:
    """A new project's SQLite file (no WAL set up, no LOGGING): the refusal is the one line the
    worker prints, and the file is left as it was (not switched to WAL first)."""
    env = {**worker_env("default"), "ULTJOBS_TEST_TMP": str(tmp_path),
           "ULTJOBS_TEST_DB_SUFFIX": "_never_migrated", "ULTJOBS_TEST_SQLITE_BARE": "1",
           "ULTJOBS_TEST_LOGGING": "none"}
    result = subprocess.run(worker_command("default", "--burst"), env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    error = one_line_error(result)
    assert error.startswith("CommandError: the django_ultjobs tables do not exist"), error
    with sqlite3.connect(tmp_path / "test_ultjobs_never_migrated.sqlite3") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


# -- text flags the database cannot store, refused before connecting -------------------------------


#: Text flags whose values no column keeps: too long for it, a byte that is not UTF-8 (Python
#: hands it over as a lone surrogate), a control character. Each must be one line naming the flag
#: at once, not a wait of --connect-timeout blamed on the database, nor a traceback.
UNSTORABLE_FLAGS = [
    (("--worker-id", b"w" * 10_000), "--worker-id must be 1 to 200 characters"),
    (("--worker-id", b"w" * 201), "--worker-id must be 1 to 200 characters"),
    (("--worker-id", b""), "--worker-id must be 1 to 200 characters"),
    (("--worker-id", b"\xff"), "--worker-id cannot contain a lone surrogate (a byte that is "
                                "not UTF-8), not '\\udcff'"),
    (("--worker-id", b"a\tb"), "--worker-id cannot contain a character that is not printable"),
    (("--queue", b"\xff"), "--queue cannot contain a lone surrogate (a byte that is not UTF-8), "
                           "not '\\udcff'"),
    (("--queue", b"q" * 101), "--queue must be 1 to 100 characters"),
    (("--queue", b"ok", "--queue", b"a\x1bb"), "--queue cannot contain a character that is not "
                                               "printable"),
]


@pytest.mark.django_db(transaction=True, databases="__all__")
@pytest.mark.parametrize(("flags", "says"), UNSTORABLE_FLAGS,
                         ids=[f"{f[0]}-{len(f[1])}" if len(f[1]) > 20 else f"{f[0]}-{f[-1]!r}"
                              for f, _ in UNSTORABLE_FLAGS])
def test_a_text_flag_no_column_keeps_is_one_line_before_connecting(
        alias: str, flags: tuple[bytes | str, ...], says: str) -> None:
    """rule 18 (start-mistake-named): the value is checked against the column it goes to, before any
    connection."""
    argv = [os.fsencode(a) if isinstance(a, str) else a
            for a in (*worker_command(alias, "--burst"), *flags)]
    started = time.monotonic()
    result = subprocess.run(argv, env=worker_env(alias), cwd=REPO, capture_output=True,
                            text=True, errors="backslashreplace", timeout=120)
    took = time.monotonic() - started
    error = one_line_error(result)
    assert error.startswith(f"CommandError: {says}"), error
    assert "unavailable" not in error, error
    # Refused before the first connection: the default --connect-timeout is 60 s.
    assert took < 30, took
    assert not Worker.objects.using(alias).exists()
