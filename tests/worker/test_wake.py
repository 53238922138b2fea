"""Rule 100: an enqueue's notification wakes the idle claim loop itself, on its own session.

The LISTEN is on the claim loop's session and the loop's waits watch its socket
(``worker/wakeup.py``, ``worker/listener.py``; performance.md item 92). Proved here: the wait
wakes on a set from another thread and on a notification, a notification read with another
statement's answer is not lost, an idle worker picks a job up long before its poll, again after
its session was killed, and a LISTEN that fails leaves polling to pick jobs up.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import psycopg
import pytest
from django.db import connections

from django_ultjobs.models import Job
from django_ultjobs.store import get_store
from django_ultjobs.worker.wakeup import Wakeup
from tests.conftest import running_worker, wait_until
from tests.testapp.jobs import record

#: A poll far longer than any pickup below: only a notification can explain a quick one.
NO_POLL = 60.0

db = pytest.mark.django_db(transaction=True, databases="__all__")


def _status(alias: str, job_id: int) -> str:
    return Job.objects.using(alias).values_list("status", flat=True).get(id=job_id)


def _session(alias: str) -> psycopg.Connection:
    settings = connections[alias].settings_dict
    return psycopg.connect(dbname=settings["NAME"], host=settings["HOST"] or None,
                           port=settings["PORT"] or None, user=settings["USER"] or None,
                           password=settings["PASSWORD"] or None, autocommit=True)


# -- the wake-up alone ----------------------------------------------------------------------------


def test_a_set_from_another_thread_ends_a_wait_and_clear_undoes_it() -> None:
    # rule 100
    wakeup = Wakeup()
    assert not wakeup.wait(0.01)
    threading.Timer(0.05, wakeup.set).start()
    started = time.monotonic()
    assert wakeup.wait(5.0)
    assert time.monotonic() - started < 2.0
    wakeup.clear()
    assert not wakeup.is_set()
    # The byte the set wrote is gone with the clear: the next wait times out.
    assert not wakeup.wait(0.05)
    wakeup.close()


@db
def test_a_notification_on_the_watched_session_ends_a_wait(pg_alias: str) -> None:
    # rule 100
    listening, sender = _session(pg_alias), _session(pg_alias)
    try:
        got: list[str] = []
        wakeup = Wakeup()
        listening.execute("LISTEN wake_test")
        listening.add_notify_handler(lambda n: (got.append(n.payload), wakeup.set()))
        wakeup.watch(listening.pgconn, lambda: True)
        assert not wakeup.wait(0.05)
        threading.Timer(0.05, sender.execute, ("NOTIFY wake_test, 'a'",)).start()
        assert wakeup.wait(5.0)
        assert got == ["a"]
        wakeup.clear()
        # A notification that arrives while the session answers another statement is handed
        # over by psycopg then, or by the next wait from what libpq read: never lost.
        sender.execute("NOTIFY wake_test, 'b'")
        listening.execute("SELECT pg_sleep(0.05)")
        assert wakeup.wait(5.0)
        assert got == ["a", "b"]
        wakeup.close()
    finally:
        listening.close()
        sender.close()


def test_a_watched_session_that_breaks_ends_the_wait() -> None:
    # rule 100
    class Broken:
        socket = -1

        def consume_input(self) -> None:
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    wakeup = Wakeup()
    wakeup.watch(Broken(), lambda: True)
    # Woken, not left waiting for the poll: the next round reconnects and LISTENs again.
    assert wakeup.wait(5.0)
    wakeup.clear()
    assert not wakeup.wait(0.01)  # no longer watched
    wakeup.close()


# -- the worker ----------------------------------------------------------------------------------



@db
def test_an_idle_worker_is_woken_by_the_enqueue_on_its_claim_session(pg_alias: str) -> None:
    # rule 100
    with running_worker(pg_alias, poll_interval=NO_POLL) as worker:
        assert worker.listener is not None and worker.listener.wait_listening(10)
        time.sleep(0.2)  # its first claims are over: it waits
        enqueued = time.monotonic()
        job_id = record.enqueue(label="woken").id
        wait_until(lambda: _status(pg_alias, job_id) == "succeeded", 10,
                   message="the notified pickup")
        assert time.monotonic() - enqueued < 5.0
        # No thread of its own between the notification and the claim.
        assert not [t for t in threading.enumerate() if t.name == "ultjobs-listener"]


@db
def test_a_killed_claim_session_listens_again_and_is_woken(pg_alias: str) -> None:
    # rule 100
    with running_worker(pg_alias, poll_interval=NO_POLL) as worker:
        listener = worker.listener
        assert listener is not None and listener.wait_listening(10)
        time.sleep(0.2)
        first = listener._raw.info.backend_pid
        with connections[pg_alias].cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", [first])
        wait_until(lambda: listener._raw is not None
                   and listener._raw.info.backend_pid != first, 10,
                   message="a LISTEN on a new session")
        time.sleep(0.2)
        job_id = record.enqueue(label="after a reconnect").id
        enqueued = time.monotonic()
        wait_until(lambda: _status(pg_alias, job_id) == "succeeded", 10,
                   message="the pickup after the reconnect")
        assert time.monotonic() - enqueued < 5.0


@db
def test_a_listen_that_fails_leaves_polling_to_pick_up(
        pg_alias: str, caplog: pytest.LogCaptureFixture) -> None:
    # rule 100
    store = get_store(pg_alias)
    store.sql = {**store.sql, "listen": "LISTEN"}  # a syntax error: every LISTEN fails
    caplog.set_level(logging.WARNING, logger="django_ultjobs.worker")
    with running_worker(pg_alias, poll_interval=0.2, store=store) as worker:
        job_id = record.enqueue(label="polled").id
        wait_until(lambda: _status(pg_alias, job_id) == "succeeded", 10,
                   message="the polled pickup")
        assert worker.listener is not None and not worker.listener.wait_listening(0)
    assert "jobs.worker.listen-failed" in caplog.text


def test_a_session_on_a_descriptor_above_1024_is_watched() -> None:
    # rule 100: a reconnect in a process whose threads hold many connections may get such a
    # descriptor, past select()'s limit; the wait must still work, not raise.
    import os
    import resource
    import socket

    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] <= 1100:
        pytest.skip("the descriptor limit is too low to open one above 1024")
    server, client = socket.socketpair()
    high = os.dup2(client.fileno(), 1100)
    got: list[bytes] = []
    wakeup = Wakeup()

    class Session:
        socket = high
        notify_handler = None

        def consume_input(self) -> None:
            with contextlib.suppress(BlockingIOError):
                got.append(os.read(high, 64))
                wakeup.set()

        def notifies(self) -> None:
            return None

    try:
        os.set_blocking(high, False)
        wakeup.watch(Session(), lambda: True)
        assert not wakeup.wait(0.05)
        server.send(b"x")
        assert wakeup.wait(5.0)
        assert got == [b"x"]
    finally:
        wakeup.close()
        os.close(high)
        server.close()
        client.close()
