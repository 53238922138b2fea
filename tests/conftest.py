"""Shared fixtures: every queue test runs on real SQLite and real PostgreSQL."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import django
import pytest
from django.db import connections
from django.test.utils import override_settings

from django_ultjobs.store import JobStore, get_store
from django_ultjobs.worker.options import WorkerOptions
from django_ultjobs.worker.worker import WorkerProcess
from tests.doubles import FakeClock

REPO = Path(__file__).resolve().parent.parent
ALIASES = {"sqlite": "default", "postgres": "postgres"}


@pytest.fixture(autouse=True)
def _unfreeze_the_heap() -> Iterator[None]:
    """``runjobworker`` freezes its process's heap for the garbage collector (the process is
    the worker's own); a test that runs the command in this process gives the heap back, or
    every later test's garbage-collection checks would see objects the collector skips."""
    # Python 3.12 starts with a few hundred objects frozen already: only what a test added.
    before = gc.get_freeze_count()
    yield
    if gc.get_freeze_count() > before:
        gc.unfreeze()


@pytest.fixture(params=list(ALIASES), ids=list(ALIASES))
def alias(request: pytest.FixtureRequest) -> Iterator[str]:
    """The database alias under test, once per engine; ULTJOBS points at it for the test."""
    name = ALIASES[request.param]
    with override_settings(ULTJOBS={"DATABASE": name}):
        yield name


@pytest.fixture
def pg_alias() -> Iterator[str]:
    """PostgreSQL only (multi-process proofs: the production engine)."""
    with override_settings(ULTJOBS={"DATABASE": "postgres"}):
        yield "postgres"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(alias: str) -> JobStore:
    return get_store(alias)


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02,
               message: str = "condition") -> Any:
    """Poll ``predicate`` until it is truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


@contextmanager
def running_worker(alias: str, **options: Any) -> Iterator[WorkerProcess]:
    """Run a WorkerProcess on a thread of this process; stop it (gracefully) when the block ends."""
    options.setdefault("threads", 4)
    options.setdefault("visibility_timeout", 5.0)
    options.setdefault("heartbeat_interval", 0.5)
    options.setdefault("poll_interval", 0.05)
    options.setdefault("grace_period", 5.0)
    store = options.pop("store", None)
    worker = WorkerProcess(WorkerOptions(database=alias, **options), store=store)
    errors: list[BaseException] = []

    def target() -> None:
        try:
            worker.run(install_signals=False)
        except BaseException as exc:  # surfaced in the test below
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, name="test-worker", daemon=True)
    thread.start()
    wait_until(lambda: worker.started.is_set() or errors, message="worker start")
    try:
        yield worker
    finally:
        worker.request_stop()
        thread.join(30)
        assert not thread.is_alive(), "worker thread did not stop"
    if errors:
        raise errors[0]


def worker_command(alias: str, *flags: str) -> list[str]:
    return [sys.executable, "-m", "django", "runjobworker", "--database", alias, *flags]


def worker_env(alias: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "ULTJOBS_USE_TEST_DATABASES": "1",
        "ULTJOBS_TEST_ALIAS": alias,
        "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
    })
    return env


class WorkerProcesses:
    """Real ``runjobworker`` processes; every one still alive is SIGKILLed at teardown."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, alias: str, *flags: str, env: dict[str, str] | None = None
              ) -> subprocess.Popen[bytes]:
        log = open(self.tmp_path / f"worker-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(worker_command(alias, *flags),
                                env={**worker_env(alias), **(env or {})},
                                cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")
                         for p in sorted(self.tmp_path.glob("worker-*.log")))

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def worker_processes(tmp_path: Path) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(tmp_path)
    try:
        yield procs
    finally:
        procs.close()


def events(caplog: pytest.LogCaptureFixture, name: str, **match: Any) -> list[dict[str, Any]]:
    """The structured fields of every ``name`` event logged so far that match ``match``."""
    found = []
    for record_ in list(caplog.records):
        if getattr(record_, "ultjobs_event", None) != name:
            continue
        fields = record_.ultjobs
        if all(fields.get(k) == v for k, v in match.items()):
            found.append(fields)
    return found


def engine_store(alias: str) -> type[JobStore]:
    return type(get_store(alias))


def tasks_api_missing() -> str | None:
    """Why this environment has no Tasks API, or None: Django 5.2 (all pip installs on Python
    3.11, where Django 6 cannot run) without the django-tasks backport. The tests of the Django
    Tasks backend then skip, saying so; on Django 6 a failing import is an error, not a skip."""
    try:
        import django_ultjobs.tasks_backend.compat  # noqa: F401
    except ImportError:
        if django.VERSION >= (6, 0):
            raise
        return (f"needs the Tasks API, which Django {django.get_version()} has only through the "
                "django-tasks backport: pip install -e '.[test,tasks52]' (.ci/test-django52 runs "
                "these tests so)")
    return None
