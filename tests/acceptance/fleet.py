"""The worker processes of an acceptance test, by worker id: started with the short-lease flags
below, waited on with their logs attached to any failure, and their logged events parsed."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Callable
from typing import Any
from uuid import uuid4

from django_ultjobs.models import Worker
from tests.conftest import WorkerProcesses, wait_until

#: Short timeouts so a lapse costs seconds, not minutes: the lease (and slot TTL) is 2 s, renewed
#: every 0.5 s (four ticks inside the timeout), idle workers poll every 50 ms.
TIMEOUT = 2.0
FLAGS = ("--visibility-timeout", "2", "--heartbeat-interval", "0.5", "--poll-interval", "0.05")


class Fleet:
    """The test's worker processes, by worker id (passed with ``--worker-id``)."""

    def __init__(self, procs: WorkerProcesses, alias: str) -> None:
        self.procs = procs
        self.alias = alias
        self.by_id: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *flags: str, env: dict[str, str] | None = None) -> str:
        worker_id = f"acc-{name}-{uuid4().hex[:6]}"
        self.by_id[worker_id] = self.procs.start(self.alias, *FLAGS, "--worker-id", worker_id,
                                                 *flags, env=env)
        return worker_id

    def pid(self, worker_id: str) -> int:
        return self.by_id[worker_id].pid

    def wait_registered(self, *worker_ids: str, timeout: float = 30.0) -> None:
        """Wait until each worker has registered itself (its row is written just before it
        starts claiming)."""
        self.wait(lambda: Worker.objects.using(self.alias).filter(id__in=worker_ids).count()
                  == len(worker_ids), timeout, f"workers {worker_ids} to register")

    def wait(self, predicate: Callable[[], Any], timeout: float, message: str) -> Any:
        """``wait_until``, failing with the workers' output (and fast if one of them died)."""

        def check() -> Any:
            dead = {w: p.returncode for w, p in self.by_id.items()
                    if p.poll() is not None and p.returncode not in (0, -signal.SIGKILL)}
            if dead:
                raise AssertionError(f"worker(s) exited unexpectedly: {dead}")
            return predicate()

        try:
            return wait_until(check, timeout=timeout, message=message)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- worker logs ---\n{self.procs.logs()[-8000:]}") \
                from None

    def events(self, event: str, **fields: Any) -> list[dict[str, str]]:
        """The logged ``event``s (``key=value`` fields) whose fields match ``fields``."""
        found = []
        for line in self.procs.logs().splitlines():
            if not line.startswith(event + " "):
                continue
            parsed = {k: v.strip('"') for k, v in _FIELD.findall(line[len(event):])}
            if all(parsed.get(k) == str(v) for k, v in fields.items()):
                found.append(parsed)
        return found


_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')
