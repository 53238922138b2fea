"""Settings for ``python -m benchmarks.throughput``: one SQLite file and one PostgreSQL database."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

SECRET_KEY = "benchmark-only"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_ultjobs",
    "benchmarks",
]
_TMP = Path(os.environ.get("BENCH_TMP", tempfile.gettempdir()))
DATABASES = {
    "sqlite": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(_TMP / "ultjobs-bench.sqlite3"),
        # As docs/deployment.md recommends for SQLite in production.
        "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE",
                    "init_command": "PRAGMA journal_mode=WAL;"},
    },
    "postgres": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("BENCH_PG_NAME", "ultjobs_bench"),
        "USER": os.environ.get("ULTJOBS_PG_USER", "postgres"),
        "HOST": os.environ.get("ULTJOBS_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("ULTJOBS_PG_PORT", "5432"),
    },
}
DATABASES["default"] = DATABASES[os.environ.get("BENCH_ALIAS", "sqlite")]
ULTJOBS = {"DATABASE": os.environ.get("BENCH_ALIAS", "sqlite")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"django_ultjobs": {"level": "WARNING"}},
}
