"""Django settings of ``python -m benchmarks.scale``'s children: the peer benchmark's (its jobs,
its database from ``BENCH_PEERS_DB``) plus the admin a logged-in superuser browses.

``BENCH_SCALE_SQLITE`` names a SQLite file to use instead of PostgreSQL (the admin on SQLite).
"""

from __future__ import annotations

import os

from benchmarks.peers.settings import *  # noqa: F403
from benchmarks.peers.settings import DATABASES, INSTALLED_APPS, ULTJOBS

INSTALLED_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.sessions",
    "django.contrib.messages", *INSTALLED_APPS,
]
if os.environ.get("BENCH_SCALE_SQLITE"):
    # As docs/deployment.md recommends for SQLite in production.
    DATABASES["default"] = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["BENCH_SCALE_SQLITE"],
        "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE",
                    "init_command": "PRAGMA journal_mode=WAL;"},
    }
ALLOWED_HOSTS = ["testserver"]
# The stats view, read with its bearer token as an autoscaler reads it.
ULTJOBS = {**ULTJOBS, "STATS_TOKEN": "benchmarks-scale-stats-token"}
ROOT_URLCONF = "benchmarks.scale.urls"
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
# The password hasher is not what is measured: the superuser is logged in once.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
