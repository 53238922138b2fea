"""Pick the store for a database alias: the engine's own, or ``ULTJOBS["STORE"]``."""

from __future__ import annotations

from django.db import connections
from django.utils.module_loading import import_string

from ..conf import get_settings
from ..exceptions import JobConfigurationError
from .base import JobStore
from .connection import Clock, unmigrated_message
from .records import (
    ClaimedJob,
    ClaimRequest,
    EnqueuedJob,
    LostAttempt,
    NewJob,
    ParkEpisode,
    RateTaken,
    SavedStep,
    Settlement,
    SlotHold,
)
from .slots import SlotStore

__all__ = [
    "ClaimRequest",
    "ClaimedJob",
    "Clock",
    "EnqueuedJob",
    "JobStore",
    "LostAttempt",
    "NewJob",
    "ParkEpisode",
    "RateTaken",
    "SavedStep",
    "Settlement",
    "SlotHold",
    "SlotStore",
    "get_store",
    "unmigrated_message",
]


def get_store(alias: str | None = None, clock: Clock | None = None) -> JobStore:
    """Return the store for ``alias`` (default: ``ULTJOBS["DATABASE"]``)."""
    conf = get_settings()
    alias = alias or conf.DATABASE
    if alias not in connections.settings:
        raise JobConfigurationError(
            f"ULTJOBS['DATABASE'] is {alias!r}, which is not in settings.DATABASES"
        )
    if conf.STORE:
        cls = import_string(conf.STORE)
        return cls(alias, clock)
    vendor = connections[alias].vendor
    if vendor == "postgresql":
        from .postgresql import PostgresStore

        return PostgresStore(alias, clock)
    if vendor == "sqlite":
        from .sqlite import SQLiteStore

        return SQLiteStore(alias, clock)
    raise JobConfigurationError(
        f"django_ultjobs runs on PostgreSQL and SQLite; DATABASES[{alias!r}] is {vendor!r}. "
        "Point ULTJOBS['DATABASE'] at a PostgreSQL or SQLite alias."
    )
