"""Settings for ``python -m benchmarks.chaos``: the private cluster it starts, and SQLite.

The cluster's port, user and database come from the environment the chaos command sets
(``CHAOS_PG_*``) before Django starts, in its own process and in every worker it runs.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

SECRET_KEY = "chaos-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["testserver", "localhost"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_ultjobs",
    "benchmarks.chaos",
]
# The periodic jobs of the clock-step scenario, in its workers only.
if os.environ.get("CHAOS_TICKS"):
    INSTALLED_APPS.append("benchmarks.chaos.ticks")
_TMP = Path(os.environ.get("CHAOS_TMP", tempfile.gettempdir()))
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("CHAOS_PG_NAME", "chaos"),
        "USER": os.environ.get("CHAOS_PG_USER", "postgres"),
        "HOST": "127.0.0.1",
        "PORT": os.environ.get("CHAOS_PG_PORT", "1"),
        # A worker's connection to a restarting cluster must fail fast, not hang.
        "OPTIONS": {"connect_timeout": 5},
    },
    # The enqueue checks run on both engines: the same input must get the same answer.
    "sqlite": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(_TMP / "chaos.sqlite3"),
        "OPTIONS": {"timeout": 30},
    },
}
ULTJOBS = {"DATABASE": "default"}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "benchmarks.chaos.urls"
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
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django_ultjobs": {"handlers": ["console"], "level": "INFO"},
        # The admin checks answer 500 on purpose sometimes; the count is the finding.
        "django.request": {"level": "CRITICAL"},
    },
}
