"""The test app: in a worker process a test starts, optionally a lowered SQLite length limit."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    default = True

    def ready(self) -> None:
        # ULTJOBS_TEST_SQLITE_MAX_LENGTH: every SQLite connection of this process refuses a
        # string or a parameter longer than this (SQLITE_TOOBIG), as a stock build does beyond
        # 1 GB: the worker tests reach the engine's own refusal with megabytes
        # (rule 30 (refused-outcome-no-wedge)).
        limit = os.environ.get("ULTJOBS_TEST_SQLITE_MAX_LENGTH")
        if limit:
            connection_created.connect(_limiter(int(limit)), weak=False)


def _limiter(limit: int) -> Any:
    def limit_length(sender: Any, connection: Any, **kwargs: Any) -> None:
        if connection.vendor == "sqlite":
            connection.connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)
    return limit_length
