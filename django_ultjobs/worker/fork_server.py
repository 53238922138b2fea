"""The fork server: the one process the process pool's children are forked from.

A worker's process has threads (the heartbeat, the completer, the listener, ...) and database
connections by the time a child must be replaced. Forking it then would copy locks some other
thread holds, and a child that freed the copies of those connections could close the parent's
sessions under it. So the pool forks this server once, at its start, from the thread that starts
it, and the server, single-threaded and holding no connection of its own, forks every child on
request: each child starts from Django set up, its jobs registered, and no connection open.

Every connection object the worker had at that moment is kept referenced in the server (and so in
its children) and never used: freeing one there would close the socket or file under the worker.
Children open their own.

Protocol: the worker sends one byte per child wanted; the server answers ``P`` + the child's pid
(8 bytes), with two descriptors (SCM_RIGHTS): the worker's end of a socket pair to the child, and a
pidfd of the child (the worker signals it and sees it end through the pidfd, so a pid reused after
the server reaped the child is never signalled), or ``E`` + why the fork failed.

Parent death: the server and each child ask the kernel for SIGKILL when their parent ends
(``PR_SET_PDEATHSIG``), and each also exits when its socket to the parent closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import select
import signal
import socket
import struct
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..exceptions import JobConfigurationError

#: ``prctl``'s option to be sent a signal when the parent ends (``<linux/prctl.h>``).
PR_SET_PDEATHSIG = 1
#: Seconds between two reapings of ended children while no request comes.
REAP_INTERVAL = 0.5

#: The connection wrappers the worker had when the server was forked: referenced for the life of
#: the server and its children, so none is ever freed (and closed) in them.
_inherited: list[Any] = []


class ChildSpawnError(OSError):
    """The fork server could not start a child (it is gone, or the fork failed)."""


def die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when its parent ends; exit now if it already has."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the socket's end-of-file still tells the process
    if os.getppid() != parent:
        os._exit(0)


class ForkServer:
    """The worker's side of the fork server."""

    def __init__(self, serve_child: Callable[[socket.socket], NoReturn]) -> None:
        self._serve_child = serve_child
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self.pid: int | None = None

    def start(self) -> None:
        """Fork the server from the calling thread (which must outlive the pool: the server's
        death signal is tied to it)."""
        ours, theirs = socket.socketpair()
        keep = [obj for obj in gc.get_objects() if isinstance(obj, BaseDatabaseWrapper)]
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:
            ours.close()
            theirs.close()
            raise JobConfigurationError(
                f"could not fork the process pool's fork server ({exc}); lower --processes "
                "or raise the system's limit on processes") from exc
        if pid == 0:
            try:
                ours.close()
                _inherited.extend(keep)
                _serve(theirs, parent, self._serve_child)
            finally:
                os._exit(1)
        del keep
        theirs.close()
        self._sock, self.pid = ours, pid

    def spawn(self) -> tuple[int, socket.socket, int]:
        """A new child: its pid, the worker's socket to it, and its pidfd."""
        with self._lock:
            sock = self._sock
            if sock is None:
                raise ChildSpawnError("the fork server is stopped")
            try:
                sock.sendall(b"s")
                message, fds, _, _ = socket.recv_fds(sock, 1024, 2)
            except OSError as exc:
                raise ChildSpawnError(f"the fork server is gone: {exc}") from exc
        if message[:1] != b"P" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            why = message[1:].decode(errors="replace") or "the fork server is gone"
            raise ChildSpawnError(why)
        (pid,) = struct.unpack("q", message[1:9])
        return pid, socket.socket(fileno=fds[0]), fds[1]

    def alive(self) -> bool:
        """Whether the server still answers (it has not exited)."""
        if self.pid is None:
            return False
        try:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return done == 0

    def stop(self) -> None:
        """End the server: its socket closes, it exits, and its death signal ends every child
        still running."""
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def _serve(sock: socket.socket, parent: int,
           serve_child: Callable[[socket.socket], NoReturn]) -> NoReturn:
    """The server's loop: fork a child per byte received; exit when the worker is gone."""
    die_with_parent(parent)
    # Ctrl-C and a stop signal sent to the whole group are the worker's to act on: it drains,
    # then ends its children itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _forget_connections()
    me = os.getpid()
    while True:
        _reap()
        ready, _, _ = select.select([sock], [], [], REAP_INTERVAL)
        if not ready:
            continue
        if not sock.recv(1):
            os._exit(0)
        try:
            ours, theirs = socket.socketpair()
            pid = os.fork()
        except OSError as exc:
            sock.sendall(b"E" + f"fork failed: {exc}".encode())
            continue
        if pid == 0:
            try:
                sock.close()
                ours.close()
                die_with_parent(me)
                serve_child(theirs)
            finally:
                os._exit(1)
        theirs.close()
        pidfd = os.pidfd_open(pid)
        socket.send_fds(sock, [b"P" + struct.pack("q", pid)], [ours.fileno(), pidfd])
        ours.close()
        os.close(pidfd)


def _forget_connections() -> None:
    """Start with no connection: the next query of each alias opens one of this process's own
    (the wrappers dropped here stay referenced in ``_inherited``, never closed)."""
    for alias in connections:
        _inherited.append(connections[alias])
        with contextlib.suppress(AttributeError):  # none made in this thread
            del connections[alias]


def _reap() -> None:
    """Collect the children that ended (their pidfds told the worker already)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
