"""The claim loop's wake-up: a flag other threads set, and a socket the loop's waits also watch.

Used as a ``threading.Event`` (``set``, ``clear``, ``is_set``, ``wait``). Besides the flag, a wait
watches the claim loop's own database session when it LISTENs (``watch``): an enqueue's
notification then wakes the claim loop itself, and the claim goes out on the session that just
received it, with no thread in between (performance.md item 92; rule 100).
"""

from __future__ import annotations

import contextlib
import math
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any


class Wakeup:
    """A ``threading.Event`` for one waiting thread, whose waits may also watch a session."""

    def __init__(self) -> None:
        self._flag = False
        self._lock = threading.Lock()
        # A byte in this pair wakes a wait blocked in poll(); the flag says why. Written only
        # while a wait polls: a set or clear with nobody waiting (a settle written while the
        # claim loop claims, each round's clear) costs no system call.
        self._recv, self._send = socket.socketpair()
        self._recv.setblocking(False)
        self._send.setblocking(False)
        self._recv_fd = self._recv.fileno()
        self._polling = False
        self._unread = False
        #: The watched session (psycopg's ``pgconn``) and whether it is still the one to watch.
        self._pgconn: Any = None
        self._current: Callable[[], bool] = _never

    def set(self) -> None:
        with self._lock:
            if self._flag:
                return
            self._flag = True
            if self._polling and not self._unread:
                self._unread = True
                with contextlib.suppress(BlockingIOError):
                    self._send.send(b"\0")

    def clear(self) -> None:
        with self._lock:
            self._flag = False
            self._read_byte()

    def is_set(self) -> bool:
        return self._flag

    def watch(self, pgconn: Any, current: Callable[[], bool]) -> None:
        """Also wake when ``pgconn`` (psycopg's libpq connection) receives data, while
        ``current()`` says it is the session to watch. Only the waiting thread may call this,
        and only that thread may use the session: a wait reads its notifications."""
        self._pgconn, self._current = pgconn, current

    def unwatch(self) -> None:
        self._pgconn, self._current = None, _never

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set or ``timeout``; return whether set. Notifications the watched
        session received are handed to its notify handler (which may set this) on the way."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            fds = [self._recv_fd]
            pg = self._pump()
            if pg is not None:
                fds.append(pg)
            remaining = None if deadline is None else deadline - time.monotonic()
            with self._lock:
                if self._flag or (remaining is not None and remaining <= 0):
                    return self._flag
                self._polling = True
            try:
                ready = _readable(fds, remaining)
            finally:
                with self._lock:
                    self._polling = False
                    self._read_byte()
            if not ready or self._flag:
                return self._flag

    def close(self) -> None:
        self.unwatch()
        self._recv.close()
        self._send.close()

    def _read_byte(self) -> None:
        """Take back the byte a set wrote (with the lock held)."""
        if self._unread:
            self._unread = False
            with contextlib.suppress(BlockingIOError):
                self._recv.recv(64)

    def _pump(self) -> int | None:
        """Hand over what the watched session received (libpq may hold a notification it read
        with a statement's answer, with nothing left on the socket); its socket, or None when
        no session is watched or it broke."""
        pgconn = self._pgconn
        if pgconn is None:
            return None
        if not self._current():
            self.unwatch()
            return None
        try:
            pgconn.consume_input()
            handler = pgconn.notify_handler
            while (notify := pgconn.notifies()) is not None:
                if handler is not None:
                    handler(notify)
            return int(pgconn.socket)
        except Exception:
            # The session broke (the server restarted, the network dropped): wake the claim
            # loop, whose next round reconnects and LISTENs again, as the poll would later.
            self.unwatch()
            self.set()
            return None


def _never() -> bool:
    return False


def _readable(fds: list[int], timeout: float | None) -> list[int]:
    """The ones of ``fds`` readable within ``timeout`` seconds. ``poll``, not ``select``, where
    there is one: a session opened after a reconnect in a process with many threads' connections
    may get a descriptor above ``select``'s limit of 1024."""
    if not hasattr(select, "poll"):
        return select.select(fds, [], [], timeout)[0]
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
    return [fd for fd, _ in poller.poll(ms)]
