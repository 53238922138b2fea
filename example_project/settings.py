"""Settings of the example project, read from the environment through django-environ.

Every value has a development default, so ``python manage.py migrate && python manage.py demo``
runs on a fresh machine with nothing set. Point ``DATABASE_URL`` at PostgreSQL to run the same
project on the production engine::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/shop python manage.py demo
"""

from __future__ import annotations

from pathlib import Path

import environ

from example_project.database_url import database_from_env

BASE_DIR = Path(__file__).resolve().parent  # example_project/
REPO_DIR = BASE_DIR.parent

env = environ.Env()

DEBUG = env.bool("DEBUG", default=True)
SECRET_KEY = env.str("SECRET_KEY", default="django-insecure-example-project-dev-only")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_ultjobs",
    "example_project.shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django_ultjobs.middleware.EnqueuedByMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# SQLite by default: the job tables live beside the shop's own, so enqueueing joins the view's
# transaction. WAL lets the web process read while a worker writes; the timeout lets writers
# queue for the lock instead of failing with "database is locked".
# A DATABASE_URL that cannot be read, or names an engine the jobs do not run on, stops here with
# one line saying what to write instead (example_project/database_url.py).
DATABASES = {"default": database_from_env(env, default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        # SQLite in production (docs/deployment.md): wait up to 30 s for the single writer,
        # begin every transaction as the writer, and let readers run beside it (WAL).
        {"timeout": 30, "transaction_mode": "IMMEDIATE",
         "init_command": "PRAGMA journal_mode=WAL;"}
    )

# ULTJOBS_STATS_TOKEN: the bearer token of /ultjobs/stats/ (docs/deployment.md); unset: staff only.
ULTJOBS = {"DATABASE": "default", "STATS_TOKEN": env.str("ULTJOBS_STATS_TOKEN", default=None)}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        # Stable event names (jobs.worker.started, jobs.worker.retrying, ...) with key=value.
        "django_ultjobs": {"handlers": ["console"], "level": env.str("ULTJOBS_LOG_LEVEL",
                                                                     default="INFO")},
    },
}

# OpenTelemetry is optional: with OTEL_TRACES_EXPORTER unset nothing is configured and the
# package's spans are the API's no-ops. See example_project/otel.py (called from
# ShopConfig.ready, so web, worker and `manage.py demo` processes alike are traced).
OTEL_TRACES_EXPORTER = env.str("OTEL_TRACES_EXPORTER", default="")
# Metrics likewise: OTEL_METRICS_EXPORTER=prometheus serves them on /metrics (web) and on
# ULTJOBS_METRICS_PORT (each worker). See example_project/metrics.py and docs/operations.md.
OTEL_METRICS_EXPORTER = env.str("OTEL_METRICS_EXPORTER", default="")
