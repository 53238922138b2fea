"""Fixtures of the django.tasks suite: TASKS, the harness per backend, a signal recorder."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.conf import settings
from django.test.utils import override_settings

from tests.conftest import tasks_api_missing

# Every test here is the Django Tasks backend's: without the Tasks API (Django 5.2 without the
# backport) they skip, with the reason, before anything imports it.
if (why := tasks_api_missing()) is not None:
    pytest.skip(why, allow_module_level=True)

from django_ultjobs.jobs.registry import registered_jobs
from django_ultjobs.tasks_backend.compat import (
    Task,
    TaskResult,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_ultjobs.testing import unregister
from tests.conftest import ALIASES, running_worker, wait_until
from tests.tasks.settings import JOB_MODULES, TASKS

# The task module is imported under its TASKS: a Task is validated by its backend when defined.
with override_settings(TASKS=TASKS):
    from tests.tasks import taskdefs  # noqa: F401


@pytest.fixture(autouse=True)
def tasks_settings() -> Iterator[None]:
    """TASKS for every test here (and only here: the rest of the suite runs without it), and
    the test tasks' package in JOB_MODULES, so a worker may import them by path
    (rule 40 (project-imports-only))."""
    with override_settings(TASKS=TASKS,
                           ULTJOBS={**settings.ULTJOBS, "JOB_MODULES": JOB_MODULES}):
        yield


@pytest.fixture(scope="package", autouse=True)
def forget_tasks() -> Iterator[None]:
    """Unregister the test tasks when the package is done, so later suites see no extra jobs."""
    yield
    for name in registered_jobs():
        if name.startswith("tests.tasks."):
            unregister(name)


def _engine(engine: str, database: str) -> Any:
    # Flushed after each test (the worker writes from its own thread, so the test must see
    # committed rows), and only the engine under test: flushing PostgreSQL costs most of a test.
    return pytest.param(engine, id=engine,
                        marks=pytest.mark.django_db(transaction=True, databases=[database]))


@pytest.fixture(params=[_engine(engine, database) for engine, database in ALIASES.items()])
def alias(request: pytest.FixtureRequest) -> Iterator[str]:
    """The database alias under test, once per engine (tests/conftest's, with its database)."""
    database = ALIASES[request.param]
    with override_settings(ULTJOBS={"DATABASE": database, "JOB_MODULES": JOB_MODULES}):
        yield database


# -- the harness: one backend under test -----------------------------------------------------------


@dataclass
class Harness:
    """Enqueue on one backend and wait for the result the way that backend delivers it.

    ``immediate`` is Django's ImmediateBackend (runs inline, keeps nothing); ``ultjobs-*`` is
    UltJobsBackend with a real worker on a thread, on SQLite or PostgreSQL.
    """

    kind: str
    backend_alias: str
    database: str | None = None

    @property
    def backend(self) -> Any:
        return task_backends[self.backend_alias]

    @property
    def inline(self) -> bool:
        return self.kind == "immediate"

    def task(self, task: Task, **changes: Any) -> Task:
        return task.using(backend=self.backend_alias, **changes)

    def enqueue(self, task: Task, *args: Any, **kwargs: Any) -> TaskResult:
        return self.task(task).enqueue(*args, **kwargs)

    def finished(self, result: TaskResult, timeout: float = 20.0) -> TaskResult:
        """Return ``result`` once finished: as it is (inline), or read back by id."""
        if self.inline:
            return result
        fetched = wait_until(lambda: _if_finished(self.backend.get_result(result.id)),
                             timeout=timeout, message=f"task {result.id} to finish")
        return fetched


def _if_finished(result: TaskResult) -> TaskResult | None:
    return result if result.is_finished else None


#: Django's backend needs no database; ours needs the engine under test (see ``alias``).
HARNESSES = [
    pytest.param("immediate", id="immediate"),
    *(_engine(f"ultjobs-{engine}", database) for engine, database in ALIASES.items()),
]


@pytest.fixture(params=HARNESSES)
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """Each contract test once per backend: Django's ImmediateBackend, ours on each engine."""
    kind: str = request.param
    if kind == "immediate":
        yield Harness(kind, "immediate")
        return
    database = ALIASES[kind.removeprefix("ultjobs-")]
    with ExitStack() as stack:
        stack.enter_context(override_settings(
            TASKS=TASKS, ULTJOBS={"DATABASE": database, "JOB_MODULES": JOB_MODULES}))
        stack.enter_context(running_worker(database, queues=("default", "emails")))
        yield Harness(kind, "default", database)


# -- signals --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """One signal as its receiver saw it, copied at send time (the result mutates later)."""

    signal: str
    sender: type
    id: str
    status: str
    worker_ids: tuple[str, ...]
    errors: int
    exc_type: type[BaseException] | None
    thread: str
    result: TaskResult = field(repr=False)


class SignalLog:
    """Every task_enqueued / task_started / task_finished sent while the fixture is active."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self._lock = threading.Lock()

    def receiver(self, name: str) -> Any:
        def receive(sender: type, task_result: TaskResult, **kwargs: Any) -> None:
            with self._lock:
                self.sent.append(Sent(
                    signal=name, sender=sender, id=task_result.id,
                    status=str(task_result.status), worker_ids=tuple(task_result.worker_ids),
                    errors=len(task_result.errors), exc_type=sys.exc_info()[0],
                    thread=threading.current_thread().name, result=task_result,
                ))
        return receive

    def of(self, result_id: str) -> list[Sent]:
        with self._lock:
            return [s for s in self.sent if s.id == result_id]

    def names(self, result_id: str) -> list[str]:
        return [s.signal for s in self.of(result_id)]


@pytest.fixture
def signals() -> Iterator[SignalLog]:
    log = SignalLog()
    receivers = [(sig, log.receiver(name)) for sig, name in
                 ((task_enqueued, "enqueued"), (task_started, "started"),
                  (task_finished, "finished"))]
    for sig, receive in receivers:
        sig.connect(receive, weak=False)
    try:
        yield log
    finally:
        for sig, receive in receivers:
            sig.disconnect(receive)
