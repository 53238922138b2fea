"""Settings for the test suite: the same tests run on SQLite ("default") and PostgreSQL."""

from __future__ import annotations

import json
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
TMP_DIR = Path(os.environ.get("ULTJOBS_TEST_TMP", BASE_DIR / ".test-tmp"))
TMP_DIR.mkdir(exist_ok=True)

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_ultjobs",
    "tests.testapp",
    "tests.stepsapp",
    # The example's shop, driven through the test client by tests/tracing (its views are under
    # shop/ in tests/urls.py).
    "example_project.shop",
]

# Worker processes of the scheduling tests also run a periodic job (tests/periodicapp).
if os.environ.get("ULTJOBS_TEST_PERIODIC"):
    INSTALLED_APPS.append("tests.periodicapp")
# ... and those of the clock-step tests, one periodic job per catch-up policy (tests/catchupapp).
if os.environ.get("ULTJOBS_TEST_CATCH_UP"):
    INSTALLED_APPS.append("tests.catchupapp")
# Worker processes of the option tests declare a job with the options this gives, as JSON
# (tests/badoptionsapp).
if os.environ.get("ULTJOBS_TEST_BAD_OPTIONS"):
    INSTALLED_APPS.append("tests.badoptionsapp")

# The queue's tests run against real engines, never a mock: SQLite in a file (threads and worker
# processes share it) and the machine's PostgreSQL.
# Parallel test runs on one machine (several sessions, or CI beside a developer) each take their
# own test databases through ULTJOBS_TEST_DB_SUFFIX.
_SUFFIX = os.environ.get("ULTJOBS_TEST_DB_SUFFIX", "")
_PG_HOST = os.environ.get("ULTJOBS_PG_HOST", "127.0.0.1")
_PG_USER = os.environ.get("ULTJOBS_PG_USER", "postgres")
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(TMP_DIR / "ultjobs.sqlite3"),
        "OPTIONS": {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"},
        "TEST": {"NAME": str(TMP_DIR / f"test_ultjobs{_SUFFIX}.sqlite3")},
    },
    "postgres": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "ultjobs",
        "USER": _PG_USER,
        "HOST": _PG_HOST,
        "PORT": os.environ.get("ULTJOBS_PG_PORT", "5432"),
        "TEST": {"NAME": f"test_ultjobs{_SUFFIX}"},
    },
}

# A worker process of the prepared-statements tests prepares every statement at its first run,
# as a site that sets OPTIONS["prepare_threshold"] does after a few, and runs each on the generic
# plan PostgreSQL may switch a prepared statement to after five runs.
if os.environ.get("ULTJOBS_TEST_PREPARE_THRESHOLD"):
    DATABASES["postgres"]["OPTIONS"] = {
        "prepare_threshold": int(os.environ["ULTJOBS_TEST_PREPARE_THRESHOLD"]),
        "options": "-c plan_cache_mode=force_generic_plan",
    }

# A worker process of the start-up tests, on an SQLite file of their own: no init_command (the
# worker's own switch to WAL is what is tried) and a short busy timeout.
if os.environ.get("ULTJOBS_TEST_SQLITE_BARE"):
    DATABASES["default"]["OPTIONS"] = {"timeout": 0.1}

# The suite runs SQLite in Django's default (deferred) transaction mode, the mode the library's
# own transactions must hold under (rule 21 (sqlite-begins-as-writer)).
# ULTJOBS_TEST_SQLITE_TRANSACTION_MODE=IMMEDIATE runs it (or a worker process of a test) as the
# deployment docs recommend.
if os.environ.get("ULTJOBS_TEST_SQLITE_TRANSACTION_MODE"):
    DATABASES["default"]["OPTIONS"]["transaction_mode"] = (
        os.environ["ULTJOBS_TEST_SQLITE_TRANSACTION_MODE"])

# Worker processes started by the tests connect straight to the test databases.
if os.environ.get("ULTJOBS_USE_TEST_DATABASES"):
    for _db in DATABASES.values():
        _db["NAME"] = _db["TEST"]["NAME"]

ULTJOBS = {"DATABASE": os.environ.get("ULTJOBS_TEST_ALIAS", "default"),
           # More ULTJOBS keys for worker processes a test starts (say, a short park delay).
           **json.loads(os.environ.get("ULTJOBS_TEST_EXTRA", "{}"))}
# A worker process of the refused-settle tests, allowed results past the default bound so the
# database's own refusal is what they meet.
if os.environ.get("ULTJOBS_TEST_MAX_RESULT_BYTES"):
    ULTJOBS["MAX_RESULT_BYTES"] = int(os.environ["ULTJOBS_TEST_MAX_RESULT_BYTES"])
# The example's metrics (example_project/metrics.py, installed with the shop), on only for the
# worker processes of tests/acceptance/test_metrics_endpoint.py: a variable of the shell's own
# must not switch them on for the suite.
OTEL_METRICS_EXPORTER = os.environ.get("ULTJOBS_TEST_OTEL_METRICS_EXPORTER", "")
DATABASE_ROUTERS = ["tests.routers.FollowJobsDatabase"]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django_ultjobs.middleware.EnqueuedByMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
STATIC_URL = "static/"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Test users' passwords need no strength: the default hasher spends about a second of CPU on each
# user an admin test creates, the fast one well under a millisecond.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_ultjobs": {"handlers": ["console"], "level": "INFO"}},
}

# Worker processes of the console-log tests run as in a new project: no LOGGING at all, or one
# that configures the root logger only.
if os.environ.get("ULTJOBS_TEST_LOGGING") == "none":
    del LOGGING
elif os.environ.get("ULTJOBS_TEST_LOGGING") == "root":
    LOGGING = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"tagged": {"format": "PROJECT %(levelname)s %(message)s"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "tagged"}},
        "root": {"handlers": ["console"], "level": "INFO"},
    }
