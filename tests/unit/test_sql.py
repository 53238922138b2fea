"""The named queries: the same names per dialect, macros expanded, nothing psycopg misreads."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from django_ultjobs.sql import queries
from django_ultjobs.store.sqlite import SQLiteStore

DIALECTS = ["postgresql", "sqlite"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_macros_are_expanded(dialect: str) -> None:
    for name, sql in queries(dialect).items():
        assert "{now" not in sql and "now_plus(" not in sql, name
        assert sql and not sql.endswith(";"), name


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_protocol_queries_exist_in_both_dialects(dialect: str) -> None:
    assert {"enqueue", "claim", "heartbeat", "settle", "record_attempts", "lease_acquire",
            "lease_renew", "lease_release"} <= set(queries(dialect))


def test_postgresql_comments_hold_no_percent_sign() -> None:
    # psycopg reads %(name)s (and any lone %) inside an SQL comment as a placeholder too.
    for name, sql in queries("postgresql").items():
        for line in sql.splitlines():
            _, _, comment = line.partition("--")
            assert "%" not in comment, (name, line)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_clocked_query_takes_now_as_a_parameter(dialect: str) -> None:
    param = "%(now)s" if dialect == "postgresql" else ":now"
    for name, sql in queries(dialect).items():
        if re.search(r"now\(\)|'now'", sql):
            assert param in sql, name  # so a test can inject its clock


def test_sqlite_time_text_is_djangos_utc_form() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert SQLiteStore.format_time(datetime(2030, 1, 2, 5, 4, 5, 120, tzinfo=plus_two)) == (
        "2030-01-02 03:04:05.000120")
    assert SQLiteStore.format_time(datetime(2030, 1, 2, 3, 4, 5)) == "2030-01-02 03:04:05.000000"


@pytest.mark.parametrize("text", ["2030-01-02 03:04:05.123", "2030-01-02 03:04:05.123000",
                                  "2030-01-02T03:04:05.123+00:00"])
def test_sqlite_time_text_parses_as_aware_utc(text: str) -> None:
    assert SQLiteStore.parse_time(text) == datetime(2030, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)
    assert SQLiteStore.parse_time(text).utcoffset() == timedelta(0)
