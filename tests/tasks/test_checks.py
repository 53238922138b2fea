"""System checks of a TASKS entry using UltJobsBackend: each misconfiguration has its id."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.apps import apps
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import override_settings
from django.utils import timezone

from django_ultjobs.models import Worker
from django_ultjobs.tasks_backend import UltJobsBackend, compat
from django_ultjobs.tasks_backend.compat import task_backends
from tests.tasks.settings import TASKS


def ids(backend: UltJobsBackend, **kwargs: object) -> list[str]:
    return [message.id for message in backend.check(**kwargs)]


@pytest.fixture
def backend() -> UltJobsBackend:
    return task_backends["default"]


@pytest.mark.django_db(databases="__all__")
def test_a_sound_configuration_has_no_messages(backend: UltJobsBackend) -> None:
    assert ids(backend, databases=["default", "postgres"]) == []
    with override_settings(ULTJOBS={"DATABASE": "postgres"}):
        assert ids(backend, databases=["default", "postgres"]) == []


@pytest.mark.django_db(databases="__all__")
def test_django_runs_them_for_every_configured_backend() -> None:
    from django.core.checks import run_checks

    if compat.SOURCE == "django_tasks":
        # The backport registers its checks in its AppConfig.ready(); the tests leave
        # 'django_tasks' out of INSTALLED_APPS, so load them as that would.
        import django_tasks.checks  # noqa: F401

    with override_settings(TASKS={"default": {"BACKEND": TASKS["default"]["BACKEND"],
                                              "QUEUES": ["", "default", "emails"]}}):
        assert "django_ultjobs.E102" in [m.id for m in run_checks()]


@pytest.mark.parametrize("database", [["default"], {"a": 1}, 2**1024])
def test_a_jobs_database_that_is_no_alias_is_left_to_e002(backend: UltJobsBackend,
                                                          database: object) -> None:
    # rule 18 (start-mistake-named): a list raised TypeError (unhashable) out of the check.
    with override_settings(ULTJOBS={"DATABASE": database}):
        assert ids(backend) == []


def test_app_not_installed(backend: UltJobsBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apps, "is_installed", lambda name: name != "django_ultjobs")
    assert ids(backend) == ["django_ultjobs.E101"]


def test_queue_names_a_job_queue_cannot_have() -> None:
    # rule 16 (bad-input-refused): the names a job's queue= refuses, and runjobworker --queue.
    backend = UltJobsBackend("default", {"QUEUES": ["default", "emails", "", "q" * 101,
                                                    "a\tb", "q\udfff", "a\x00b", 5]})
    messages = list(backend.check())
    assert [m.id for m in messages] == ["django_ultjobs.E102"]
    for bad in ("''", "q" * 101, "'a\\tb'", "'q\\udfff'", "'a\\x00b'", "5"):
        assert bad in messages[0].msg, (bad, messages[0].msg)
    assert "'emails'" not in messages[0].msg.split(": ", 1)[1]


def test_a_task_on_a_queue_the_backend_does_not_list() -> None:
    # Defined (tests/tasks/taskdefs) while TASKS listed "emails"; then QUEUES lost it.
    from tests.tasks.taskdefs import email

    email.job_spec()  # registered in this process, as a worker's import would
    from django_ultjobs.jobs.registry import get_job

    assert get_job(email.module_path) is not None
    backend = UltJobsBackend("default", {"QUEUES": ["default"]})
    messages = [m for m in backend.check() if m.id == "django_ultjobs.E103"]
    assert [m.obj for m in messages] == ["tests.tasks.taskdefs.email"]
    assert ids(UltJobsBackend("default", {"QUEUES": []})) == []  # empty: any queue


def test_in_memory_sqlite(backend: UltJobsBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(type(connections["default"]), "is_in_memory_db", lambda self: True)
    assert ids(backend) == ["django_ultjobs.E104"]


@pytest.mark.django_db(databases="__all__")
def test_unapplied_migrations_warn(backend: UltJobsBackend,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    original = MigrationExecutor.migration_plan

    def unapplied(self: MigrationExecutor, targets: list[tuple[str, str]],
                  clean_start: bool = False) -> list[tuple[object, bool]]:
        # As if the newest migration of django_ultjobs had not run yet.
        leaf = self.loader.graph.nodes[targets[0]]
        return [(leaf, False)] if targets else original(self, targets, clean_start)

    monkeypatch.setattr(MigrationExecutor, "migration_plan", unapplied)
    messages = list(backend.check(databases=["default"]))
    assert [m.id for m in messages] == ["django_ultjobs.W101"]
    assert "manage.py migrate --database default" in messages[0].hint
    # Not asked for database checks: the database is not read.
    assert ids(backend) == []


@pytest.fixture
def workers_on_two_hosts() -> Iterator[None]:
    now = timezone.now()
    for host in ("web-1", "web-2"):
        Worker.objects.using("default").create(
            id=f"{host}:1:abc", hostname=host, pid=1, threads=4, queues=["default"],
            last_seen_at=now)
    yield


@pytest.mark.django_db(databases="__all__")
def test_sqlite_shared_by_hosts(backend: UltJobsBackend, workers_on_two_hosts: None) -> None:
    messages = list(backend.check(databases=["default"]))
    assert [m.id for m in messages] == ["django_ultjobs.W102"]
    assert "web-1, web-2" in messages[0].msg
    with override_settings(ULTJOBS={"DATABASE": "postgres"}):  # PostgreSQL: hosts are fine
        assert ids(backend, databases=["default", "postgres"]) == []


def test_backport_without_its_app_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    from django_ultjobs import checks

    with override_settings(TASKS=TASKS):
        if compat.SOURCE == "django.tasks":
            assert checks.check_tasks_backport() == []
            monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
        assert [m.id for m in checks.check_tasks_backport()] == ["django_ultjobs.W103"]
        monkeypatch.setattr(apps, "is_installed", lambda name: True)
        assert checks.check_tasks_backport() == []
