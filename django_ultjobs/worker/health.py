"""The worker's health server: ``GET /livez`` and ``GET /readyz`` and nothing else
(rule 123 (probes-only)).

The standard library's threading HTTP server on a daemon thread of the worker: a probe is a
few field reads (``Vitals``), so a framework would add nothing but weight. It serves while the
worker runs, from before the start-up wait (``/readyz`` says "starting") to the end of the drain.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from ..exceptions import JobConfigurationError
from ..observability.logs import log_event

logger = logging.getLogger("django_ultjobs.worker")

#: A probe: why the worker fails it (one line), or None when it passes.
Probe = Callable[[], "str | None"]
#: Seconds a probe's connection may stay silent: a client that connects and sends nothing
#: holds a thread of the server only this long.
REQUEST_TIMEOUT = 5.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    probes: Mapping[str, Probe]


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = REQUEST_TIMEOUT
    server_version = "django_ultjobs"
    sys_version = ""

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        probe = self.server.probes.get(path)
        if probe is None:
            self._reply(404, f"not found: {path} (this server answers /livez and /readyz)")
            return
        reason = probe()
        self._reply(200 if reason is None else 503, reason or "ok")

    def __getattr__(self, name: str) -> Any:
        # Every other method (POST, HEAD, PUT, or one nobody defined) is refused alike, not with
        # http.server's 501 "unsupported method".
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        self._reply(405, f"method {self.command} not allowed: the probes answer GET",
                    allow="GET")

    def _reply(self, status: int, line: str, *, allow: str | None = None) -> None:
        body = (line + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if allow is not None:
            self.send_header("Allow", allow)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # A probe every few seconds would fill the worker's log; a bad request is the
        # prober's to see (its status), not the worker's.
        pass


class HealthServer:
    """Serve ``probes`` (path to probe) on ``host``:``port`` from a daemon thread."""

    def __init__(self, probes: Mapping[str, Probe], *, host: str, port: int,
                 worker_id: str) -> None:
        self.worker_id = worker_id
        server_class = _Server6 if ":" in host else _Server
        try:
            self._server = server_class((host, port), _Handler)
        except OSError as exc:
            raise JobConfigurationError(_cannot_listen(host, port, exc)) from exc
        self._server.probes = probes
        self.host = host
        #: The port listened on: the one asked for, or the one the system picked for 0.
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.5,),
                                        name="ultjobs-health", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log_event(logger, logging.INFO, "jobs.worker.health-listening", worker_id=self.worker_id,
                  host=self.host, port=self.port, probes=",".join(self._server.probes))

    def stop(self) -> None:
        """Stop serving and close the socket; a probe answered meanwhile finishes on its own
        thread within ``REQUEST_TIMEOUT``."""
        if self._thread.is_alive():
            # shutdown() waits for serve_forever to return: only when it runs.
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


def _cannot_listen(host: str, port: int, exc: OSError) -> str:
    """Why the health server cannot listen, in one line naming the flag to change
    (rule 18 (start-mistake-named))."""
    if exc.errno == errno.EADDRINUSE:
        return (f"--health-port {port}: {host}:{port} is in use by another process; choose "
                "another port, or 0 for one the system picks")
    if exc.errno == errno.EACCES:
        return (f"--health-port {port}: not allowed to listen on port {port} as this user; "
                "choose a port from 1024")
    detail = " ".join(str(exc.strerror or exc).split())
    return (f"--health-host {host!r}: cannot listen there ({detail}); give an address of this "
            "machine, such as 127.0.0.1 or 0.0.0.0")
