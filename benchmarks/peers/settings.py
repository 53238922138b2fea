"""Django settings for the Django-based systems of ``python -m benchmarks.peers``.

``BENCH_PEERS_DB`` names the (fresh) database; ``BENCH_PEERS_SYSTEM`` is ``ours``,
``django-tasks-db`` or ``celery`` (its worker configured with Django for the Django-shaped
job). django-tasks-db gets its best documented setting: a psycopg connection pool
(``OPTIONS["pool"]``, Django 5.1+); ours uses Django's ordinary per-thread connections, as a
``runjobworker`` does in production.
"""

from __future__ import annotations

import os

from benchmarks.peers.common import PG_HOST, PG_PASSWORD, PG_PORT, PG_USER

SYSTEM = os.environ.get("BENCH_PEERS_SYSTEM", "ours")

SECRET_KEY = "benchmark-only"
USE_TZ = True
TIME_ZONE = "UTC"
DEBUG = False
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django_ultjobs",
    "benchmarks.peers",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("BENCH_PEERS_DB", "ultjobs_peers_ours"),
        "USER": PG_USER,
        "PASSWORD": PG_PASSWORD,
        "HOST": PG_HOST,
        "PORT": PG_PORT,
    },
}
if os.environ.get("BENCH_PEERS_ENGINE") == "sqlite":
    # Ours only (``python -m benchmarks.peers.ours sqlite-pickup``): the same jobs on a file.
    import tempfile

    DATABASES["default"] = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(tempfile.gettempdir(), "ultjobs-peers-pickup.sqlite3"),
        "OPTIONS": {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"},
    }
if os.environ.get("BENCH_PEERS_PREPARE", "off") != "off" and \
        DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # Ours with prepared statements: Django's documented OPTIONS, which a site sets when its
    # connections are direct (or behind PgBouncer 1.21+ with max_prepared_statements).
    DATABASES["default"]["OPTIONS"] = {"prepare_threshold": int(os.environ["BENCH_PEERS_PREPARE"])}
ULTJOBS = {"DATABASE": "default"}
if os.environ.get("BENCH_PEERS_WORKLOAD") == "django" and SYSTEM != "django-tasks-db":
    # The Django-shaped job's bodies (ours, and Celery's worker configured with Django) keep
    # their connections between jobs, as a site's worker settings would: with Django's default
    # CONN_MAX_AGE=0 both would reconnect for every job. django-tasks-db pools instead.
    DATABASES["default"]["CONN_MAX_AGE"] = 60

if SYSTEM == "django-tasks-db":
    INSTALLED_APPS.append("django_tasks_db")
    DATABASES["default"]["OPTIONS"] = {"pool": True}
    TASKS = {
        "default": {
            "BACKEND": "django_tasks_db.DatabaseBackend",
            "QUEUES": ["default"],
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # Quiet workers on every side: a log line per job is not what is being measured.
    "loggers": {
        "django_ultjobs": {"level": "WARNING"},
        "django_tasks_db": {"level": "WARNING"},
        "django.tasks": {"level": "WARNING"},
    },
}
