"""A TCP proxy in front of the private cluster that loses replies: for a request carrying
``marker`` it forwards the request, lets PostgreSQL run (and commit) it, then cuts the
connection instead of passing the reply on. The client sees its connection die with no answer,
though its statement committed: a COMMIT reply lost to a crash, a failover or a network cut,
on demand instead of by luck of timing."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time


class ReplyDropper:
    """Listen on a free local port; forward to ``upstream``; lose the reply to a fraction
    ``rate`` of the requests that contain ``marker``."""

    def __init__(self, upstream: int, marker: bytes, rate: float, rng: random.Random) -> None:
        self.upstream = upstream
        self.marker = marker
        self.rate = rate
        self.rng = rng
        self.dropped: list[float] = []  # when each reply was lost
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = False

    def start(self) -> ReplyDropper:
        threading.Thread(target=self._accept, daemon=True, name="chaos-proxy").start()
        return self

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            drop = threading.Event()  # set: the reply now on its way is to be lost
            threading.Thread(target=self._requests, args=(client, server, drop),
                             daemon=True).start()
            threading.Thread(target=self._replies, args=(client, server, drop),
                             daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket,
                  drop: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                if self.marker in data and self.rng.random() < self.rate:
                    drop.set()  # before the request leaves, so its reply cannot slip through
                server.sendall(data)
        except OSError:
            pass
        _cut(client, server)

    def _replies(self, client: socket.socket, server: socket.socket,
                 drop: threading.Event) -> None:
        try:
            while data := server.recv(65536):
                if drop.is_set():
                    self.dropped.append(time.time())
                    break
                client.sendall(data)
        except OSError:
            pass
        _cut(client, server)


def _cut(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
