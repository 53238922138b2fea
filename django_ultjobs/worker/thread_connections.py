"""Leave a thread's database connections as the next run on it expects them: an executor thread's
after each run, and a child process's (``child.py``)."""

from __future__ import annotations

import threading
from typing import Any

from django.db import connections
from django.db.backends.signals import connection_created


class _Opened(threading.local):
    """Whether this thread has opened a database connection: Django sends ``connection_created``
    on the thread that connects, and a thread that never did has nothing to reset."""

    any = False


_opened = _Opened()


def note_opened(**kwargs: Any) -> None:
    """Note that this thread opened a database connection (``connection_created``)."""
    _opened.any = True


connection_created.connect(note_opened, weak=False, dispatch_uid="django_ultjobs.worker.opened")


def reset_connections() -> None:
    """Leave an executor thread's connections as a new run expects them.

    A body that left a transaction open would otherwise leak it into the next job on this
    thread; a connection that broke is closed so the next run reconnects. Connections obey
    CONN_MAX_AGE exactly as Django's request handling does.
    """
    if not _opened.any:
        # Asking Django which connections the thread has raises and catches an exception per
        # alias when it has none, most runs' case: bodies that never touch the database.
        return
    for conn in connections.all(initialized_only=True):
        try:
            if conn.connection is not None and not conn.in_atomic_block \
                    and not conn.get_autocommit():
                conn.rollback()
                conn.set_autocommit(True)
            conn.close_if_unusable_or_obsolete()
        except Exception:
            conn.close()
