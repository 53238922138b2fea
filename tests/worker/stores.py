"""Store classes for ``ULTJOBS["STORE"]`` in the worker tests (import_string needs a path)."""

from __future__ import annotations

from django_ultjobs.store import LeaseStore
from django_ultjobs.store.postgresql import PostgresStore
from django_ultjobs.store.sqlite import SQLiteStore


class NoLeaseSQLiteStore(SQLiteStore):
    """The SQLite store pretending its engine ships no lease store (rule 10)."""

    @property
    def leases(self) -> LeaseStore | None:
        return None


class NoLeasePostgresStore(PostgresStore):
    """The PostgreSQL store pretending its engine ships no lease store (rule 10)."""

    @property
    def leases(self) -> LeaseStore | None:
        return None


def no_lease_store_path(alias: str) -> str:
    """The dotted path of the no-lease store for ``alias``'s engine."""
    name = "NoLeasePostgresStore" if alias == "postgres" else "NoLeaseSQLiteStore"
    return f"{__name__}.{name}"
