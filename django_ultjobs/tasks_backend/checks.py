"""System checks of a ``TASKS`` entry that uses ``UltJobsBackend``.

Run by ``UltJobsBackend.check()``, which Django calls for every configured TASKS backend. Nothing
here imports the Tasks API, so this module loads on Django 5.2 without the backport.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.core.checks import CheckMessage, Error, Warning
from django.db import connections

from ..conf import get_settings
from ..core.numeric import shown
from ..exceptions import JobConfigurationError

#: Live ``runjobworker`` rows seen this recently count as running processes.
_LIVE_WORKER_WINDOW = 120.0


def check_tasks_backend(backend: Any, databases: Collection[str] | None = None,
                        **kwargs: Any) -> list[CheckMessage]:
    """Check a ``TASKS`` entry that uses ``UltJobsBackend``.

    The checks that read the jobs database (migrations, live workers) run only when Django asks
    for database checks (``databases``), as Django's own database checks do.
    """
    from django.apps import apps

    where = f"TASKS[{backend.alias!r}]"
    if not apps.is_installed("django_ultjobs"):
        return [Error(
            f"{where} uses UltJobsBackend, but 'django_ultjobs' is not in INSTALLED_APPS",
            hint="Add 'django_ultjobs' to INSTALLED_APPS and run manage.py migrate.",
            id="django_ultjobs.E101",
        )]
    messages = _check_queues(backend, where)
    try:
        conf = get_settings()
    except JobConfigurationError:
        return messages  # django_ultjobs.E001 says why
    if not isinstance(conf.DATABASE, str) or conf.DATABASE not in connections.settings:
        return messages  # django_ultjobs.E002 says so
    connection = connections[conf.DATABASE]
    if connection.vendor == "sqlite" and connection.is_in_memory_db():
        messages.append(Error(
            f"{where} enqueues into DATABASES[{conf.DATABASE!r}], an in-memory SQLite "
            "database: runjobworker runs in another process, which has a database of its own "
            "and never sees these tasks",
            hint="Give the SQLite database a file NAME, or use PostgreSQL.",
            id="django_ultjobs.E104",
        ))
        return messages
    if databases and conf.DATABASE in databases:
        messages.extend(_check_database(conf.DATABASE, where))
    return messages


def _check_queues(backend: Any, where: str) -> list[CheckMessage]:
    from ..jobs.options import MAX_QUEUE, name_problem
    from ..jobs.registry import registered_jobs

    messages: list[CheckMessage] = []
    # rule 16 (bad-input-refused): the rule of a job's queue=, and of runjobworker --queue.
    bad = sorted(shown(q) for q in backend.queues if name_problem(q, MAX_QUEUE) is not None)
    if bad:
        messages.append(Error(
            f"{where}['QUEUES'] has names a job queue cannot have: {', '.join(bad)}",
            hint=f"Queue names are 1 to {MAX_QUEUE} printable characters of text (no control "
                 "character, NUL or lone surrogate), as runjobworker --queue takes them.",
            id="django_ultjobs.E102",
        ))
    if not backend.queues:
        return messages  # Django reads an empty QUEUES as "any queue"
    for name, spec in sorted(registered_jobs().items()):
        task = getattr(spec.func, "task", None)
        if task is None or task.backend != backend.alias:
            continue
        if task.queue_name not in backend.queues:
            messages.append(Error(
                f"task {name} is queued on {task.queue_name!r}, which {where}['QUEUES'] "
                f"({sorted(backend.queues)}) does not list",
                hint="Add the queue to QUEUES (and run a worker with --queue for it).",
                obj=name,
                id="django_ultjobs.E103",
            ))
    return messages


def _check_database(alias: str, where: str) -> list[CheckMessage]:
    from datetime import timedelta

    from django.db import DatabaseError
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    from ..models import Worker

    messages: list[CheckMessage] = []
    try:
        executor = MigrationExecutor(connections[alias])
        targets = [key for key in executor.loader.graph.leaf_nodes()
                   if key[0] == "django_ultjobs"]
        pending = [migration.name for migration, _ in executor.migration_plan(targets)]
    except DatabaseError:
        return messages  # unreachable database: Django's own checks and the worker say so
    if pending:
        # A warning, not an error: an error would stop `manage.py migrate`, the cure.
        messages.append(Warning(
            f"{where}: django_ultjobs has unapplied migrations on database {alias!r} "
            f"({', '.join(pending)}); enqueueing a task fails until they are applied",
            hint=f"Run manage.py migrate --database {alias}.",
            id="django_ultjobs.W101",
        ))
        return messages
    if connections[alias].vendor != "sqlite":
        return messages
    since = timezone.now() - timedelta(seconds=_LIVE_WORKER_WINDOW)
    try:
        hosts = sorted(set(
            Worker.objects.using(alias)
            .filter(stopped_at__isnull=True, last_seen_at__gte=since)
            .values_list("hostname", flat=True)
        ))
    except DatabaseError:
        return messages
    if len(hosts) > 1:
        messages.append(Warning(
            f"{where}: workers on {len(hosts)} hosts ({', '.join(hosts)}) share the SQLite "
            f"database {alias!r}. SQLite's WAL mode needs every process on one host (it locks "
            "through shared memory); over a network filesystem locking fails and the file can "
            "be corrupted",
            hint="Run every worker on the web server's host, or move the jobs to PostgreSQL.",
            id="django_ultjobs.W102",
        ))
    return messages
