"""Read ``DATABASE_URL`` for the example, refusing a bad one in one line.

A URL django-environ cannot read, or one naming an engine django_ultjobs does not run on, would
otherwise surface as a 60-90 line traceback from deep inside Django's start-up (a port that is
not a number, ``KeyError: 'ENGINE'``, "'postgress' isn't an available database backend").
"""

from __future__ import annotations

import importlib.util
import re
import warnings
from typing import Any

import environ

POSTGRES = "django.db.backends.postgresql"
SQLITE = "django.db.backends.sqlite3"
EXAMPLES = ("postgres://USER:PASSWORD@HOST:5432/NAME or sqlite:////absolute/path/db.sqlite3 "
            "(sqlite:///relative/path.sqlite3)")


def database_from_env(env: environ.Env, default: str) -> dict[str, Any]:
    """``DATABASES["default"]`` from ``DATABASE_URL`` (or ``default``); exit with one line
    saying what is wrong with the URL and what to write instead."""
    url = env.str("DATABASE_URL", default=default)
    shown = redact(url)
    if not url.strip():
        raise SystemExit(f"DATABASE_URL is set but empty: unset it for the example's SQLite file, "
                         f"or use {EXAMPLES}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Engine not recognized": reported below instead
            config = env.db_url_config(url)
    except Exception as exc:  # any failure to parse is the URL's
        raise SystemExit(f"DATABASE_URL={shown!r} cannot be read ({exc}); use {EXAMPLES}") \
            from None
    engine = config.get("ENGINE") or ""
    if engine not in (POSTGRES, SQLITE):
        scheme = url.split(":", 1)[0] if ":" in url else url
        raise SystemExit(f"DATABASE_URL={shown!r}: {scheme!r} is not a database this example "
                         f"runs on (django_ultjobs runs on PostgreSQL and SQLite); use {EXAMPLES}")
    if not config.get("NAME"):
        raise SystemExit(f"DATABASE_URL={shown!r} names no database; use {EXAMPLES}")
    if engine == POSTGRES and importlib.util.find_spec("psycopg") is None \
            and importlib.util.find_spec("psycopg2") is None:
        raise SystemExit(f"DATABASE_URL={shown!r} is PostgreSQL, but psycopg is not installed: "
                         "pip install -e '.[example,postgres]'")
    return config


def redact(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``."""
    return re.sub(r"^([^:/]+://[^:@/]*:)[^@/]*@", r"\1***@", url)
