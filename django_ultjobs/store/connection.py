"""The store's connection: the calling thread's Django connection for the jobs database, the
cursor every statement of the store goes through, how an engine's errors are read, and the
parameter forms of each engine.

Every method uses the calling thread's own Django connection for ``alias`` (Django keeps one per
thread), through the cursor ``connection.cursor()`` gives (rule 41 (instrumented-statements)):
the ORM is skipped, not Django's cursor wrappers, so ``assertNumQueries``,
``connection.execute_wrapper`` and the tools built on them see every statement, and enqueue joins
the caller's transaction because it is the same connection.
"""

from __future__ import annotations

import json
from abc import ABC
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, ClassVar

from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..exceptions import JobTablesMissingError
from ..sql import django_queries

#: A clock the store reads instead of the database's, for tests only; None means the database's.
Clock = Callable[[], datetime]

#: What every table of this package is named with: a missing table that is not one of them is
#: the site's own error, not a forgotten migrate of this app.
TABLE_PREFIX = "django_ultjobs_"


def unmigrated_message(alias: str) -> str:
    """Say that the job tables are missing (or old) in ``alias`` and how to create them."""
    flag = "" if alias == "default" else f" --database {alias}"
    return (f"the django_ultjobs tables do not exist in database {alias!r} "
            f"({connections[alias].settings_dict.get('NAME')}), or are older than this version "
            f"of django_ultjobs: run `python manage.py migrate{flag}`")


class StoreConnection(ABC):
    """The connection, cursor, errors and parameter forms every part of a store uses."""


    #: The Django ``connection.vendor`` this store speaks to.
    vendor: ClassVar[str]
    #: The dialect whose named queries this store runs.
    dialect: ClassVar[str]

    def __init__(self, alias: str, clock: Clock | None = None) -> None:
        self.alias = alias
        self.clock = clock
        self.sql = django_queries(self.dialect)

    @property
    def connection(self) -> BaseDatabaseWrapper:
        """The calling thread's Django connection for this store's alias."""
        return connections[self.alias]

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        """Yield Django's cursor on this thread's connection, errors as Django's.

        Django's cursor wrapper, not the driver's cursor (rule 41 (instrumented-statements)):
        ``execute_wrapper`` hooks, the queries log (``assertNumQueries``, ``CaptureQueriesContext``,
        ``DEBUG``) and tools that patch ``connection.cursor()`` see every statement of the store.

        A connection that broke (the database restarted, the network dropped), or that lost
        state every later statement needs (``spoils_connection``), is closed so the next call
        reconnects instead of failing forever: a dead database is an outage to wait out, not a
        reason for a worker thread to die.
        """
        conn = self.connection
        try:
            cur = self._django_cursor(conn)
            with conn.wrap_database_errors:
                try:
                    yield cur
                finally:
                    cur.close()
        except Exception as exc:
            if conn.connection is None or self.in_callers_transaction(conn):
                raise
            if self.spoils_connection(exc):
                # Closed before Django lets go of it: Django's pool (OPTIONS["pool"]) takes an
                # open connection back as it is, and would hand the same one out again.
                conn.connection.close()
                conn.close()
            elif not conn.is_usable():
                conn.close()
            raise

    def write_transaction(self) -> AbstractContextManager[Any]:
        """``transaction.atomic()`` on the jobs database, for a block that reads, then writes.

        Engines whose default transaction cannot do that under contention override it (SQLite
        begins it as the writer). Inside an open ``atomic`` block this is a savepoint of the
        caller's transaction, which began the way the caller's began.
        """
        return transaction.atomic(using=self.alias)

    def in_callers_transaction(self, conn: BaseDatabaseWrapper) -> bool:
        """Whether the caller has a transaction open on ``conn`` (an ``atomic`` block, engines
        add their own signs): then the connection is the caller's to keep or drop, never ours."""
        return conn.in_atomic_block

    def execute_unprepared(self, cur: Any, name: str, params: Mapping[str, Any]) -> None:
        """Run query ``name``, planned for these parameters every time: for the queries whose
        plan depends on their values (engines that can prepare statements override)."""
        cur.execute(self.sql[name], params)

    def spoils_connection(self, exc: BaseException) -> bool:
        """Whether ``exc`` leaves this connection failing every later statement of its kind,
        though it still answers (engines override)."""
        return False

    def refuses(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the database (or the encoding before it) refusing the *values* of
        a statement, which no retry will change: a string too long, a value out of range, a
        constraint broken. Not an outage: a lost connection, a locked database, a full disk are
        waited out (rule 30 (refused-outcome-no-wedge)). Engines add their own codes."""
        return isinstance(exc, (ValueError, TypeError, OverflowError, RecursionError))

    def refusal_reason(self, exc: BaseException) -> str:
        """The database's own words for a refusal, in one line (engines add their detail)."""
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")

    def unfit_settings(self) -> str | None:
        """What in the database's settings would make this store misread its own statements, as
        a sentence for the operator; None when nothing does (engines override)."""
        return None

    def schema_missing(self, exc: BaseException) -> bool:
        """Whether ``exc`` says a table or column of this package does not exist in the
        database: a database nobody migrated, which no wait will fix (engines override)."""
        return False

    def tables_missing(self, exc: BaseException) -> bool:
        """Whether ``exc`` says a table or column of this package does not exist, naming it:
        ``schema_missing``, and never a missing table of the site's own."""
        return self.schema_missing(exc) and TABLE_PREFIX in str(exc)

    @contextmanager
    def tables_required(self) -> Iterator[None]:
        """Turn the database's "no such table" of this package's tables into one line saying
        to run ``migrate`` (rule 109 (missing-tables-named)); every other error passes as it was.

        Raised, never swallowed: on PostgreSQL the failed statement has aborted the caller's
        transaction, which must roll back as it would for the driver's own error."""
        try:
            yield
        except DatabaseError as exc:
            if isinstance(exc, JobTablesMissingError) or not self.tables_missing(exc):
                raise
            raise JobTablesMissingError(unmigrated_message(self.alias)) from exc

    def _django_cursor(self, conn: BaseDatabaseWrapper) -> Any:
        """``conn.cursor()``: Django's wrapper (engines override to put a faster driver cursor
        inside it)."""
        return conn.cursor()

    def now_param(self) -> Any:
        """The ``now`` parameter of every query: None (database clock) unless a clock is set."""
        return None if self.clock is None else self.format_time(self.clock())

    @staticmethod
    def format_time(value: datetime) -> Any:
        """Turn a datetime into this engine's parameter form."""
        return value

    @staticmethod
    def parse_time(value: Any) -> datetime:
        """Turn a returned time into an aware datetime."""
        assert isinstance(value, datetime)
        return value

    @staticmethod
    def token_param(token: str) -> Any:
        """A claim token in this engine's parameter form."""
        return token

    @staticmethod
    def parse_json(value: Any) -> Any:
        """Turn a returned JSON column into Python."""
        return json.loads(value) if isinstance(value, (str, bytes)) else value

    @staticmethod
    def ids_param(ids: Sequence[int]) -> Any:
        """Job ids in this engine's parameter form (an array; SQLite: JSON)."""
        return list(ids)

    @staticmethod
    def queues_param(queues: Sequence[str]) -> Any:
        """Queue names in this engine's parameter form (an array; SQLite: JSON)."""
        return list(queues)

    def _json_time(self, value: datetime) -> str:
        """A time inside a JSON batch parameter, in the form this engine compares."""
        return value.isoformat()
