"""The named queries: the same names per dialect, macros expanded, nothing psycopg misreads."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from django_ultjobs.sql import django_queries, queries
from django_ultjobs.store.sqlite import SQLiteStore

DIALECTS = ["postgresql", "sqlite"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_macros_are_expanded(dialect: str) -> None:
    for name, sql in queries(dialect).items():
        assert "{now" not in sql and "now_plus(" not in sql, name
        assert sql and not sql.endswith(";"), name


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_protocol_queries_exist_in_both_dialects(dialect: str) -> None:
    assert {"enqueue", "claim", "heartbeat", "settle", "record_attempts", "slot_acquire",
            "slot_renew", "slot_release"} <= set(queries(dialect))


#: psycopg caches a statement's conversion to ``$n`` placeholders only up to this length
#: (``psycopg._queries.MAX_CACHED_STATEMENT_LENGTH``); a longer one is parsed again on every run.
PSYCOPG_CACHED_LENGTH = 4096


@pytest.mark.parametrize("dialect", DIALECTS)
def test_queries_are_sent_tagged_and_without_comment_lines(dialect: str) -> None:
    for name, sql in queries(dialect).items():
        assert sql.startswith(f"/* django_ultjobs:{name} */ "), name
        assert not [line for line in sql.splitlines() if line.lstrip().startswith("--")], name


@pytest.mark.parametrize("dialect", DIALECTS)
def test_no_literal_spans_lines(dialect: str) -> None:
    # Comment lines are dropped line by line (no SQL parser): a string literal or a $$ body
    # spanning lines could lose a line of its own that starts with "--".
    for name, sql in queries(dialect).items():
        assert "$$" not in sql, name
        for line in sql.splitlines():
            assert line.count("'") % 2 == 0, (name, line)


def test_postgresql_queries_fit_psycopgs_statement_cache() -> None:
    from psycopg import _queries

    assert _queries.MAX_CACHED_STATEMENT_LENGTH == PSYCOPG_CACHED_LENGTH
    for name, sql in queries("postgresql").items():
        assert len(sql.encode()) <= PSYCOPG_CACHED_LENGTH, (name, len(sql))


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


def test_sqlite_queries_reach_sqlite_unchanged_through_djangos_cursor() -> None:
    # Django's SQLite cursor takes %(name)s and %% (rule 41 (instrumented-statements)) and turns
    # them into :name and % with the names of the parameters it is given: what SQLite runs is the
    # .sql file's own text.
    named = re.compile(r"%\((\w+)\)s")
    for name, sql in django_queries("sqlite").items():
        params = {param: f":{param}" for param in named.findall(sql)}
        assert sql % params == queries("sqlite")[name], name


def test_postgresql_queries_go_to_psycopg_as_written() -> None:
    assert django_queries("postgresql") == queries("postgresql")
