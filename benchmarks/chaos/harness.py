"""The chaos run's hands: real ``runjobworker`` processes, the private cluster, the database.

Every worker is its own OS process, as in production; the harness starts them, SIGKILLs or
SIGTERMs them, reads their logs, and reads the job rows through Django in this process (every
read retried while the cluster is down or restarting).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from uuid import uuid4

from benchmarks.chaos.cluster import PrivateCluster

REPO = Path(__file__).resolve().parents[2]
DATABASE = "chaos"
#: Short leases so a lapse costs seconds: renewed every 0.5 s, four ticks inside the timeout.
VISIBILITY_TIMEOUT = 2.0
WORKER_FLAGS = ("--visibility-timeout", str(VISIBILITY_TIMEOUT), "--heartbeat-interval", "0.5",
                "--poll-interval", "0.05", "--grace-period", "2")

T = TypeVar("T")


@dataclass
class WorkerProcess:
    worker_id: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None


class Harness:
    """One chaos run: the cluster, a directory per scenario, the workers of the scenario."""

    def __init__(self, cluster: PrivateCluster, short: bool) -> None:
        self.cluster = cluster
        self.short = short
        self.root = cluster.root / "run"
        self.root.mkdir(parents=True, exist_ok=True)
        self.scenario_dir = self.root
        self.workers: list[WorkerProcess] = []

    # -- scenarios ---------------------------------------------------------------------------

    def begin(self, scenario: str) -> None:
        """Empty the job tables and give the scenario fresh directories for runs and logs."""
        from django.apps import apps
        from django.db import connection

        self.scenario_dir = self.root / scenario
        shutil.rmtree(self.scenario_dir, ignore_errors=True)
        (self.scenario_dir / "runs").mkdir(parents=True)
        os.environ["CHAOS_RUNS_DIR"] = str(self.scenario_dir / "runs")
        # Tables only: AttemptRecord is a view (rule 97 (attempt-on-row)), emptied with the tables
        # it reads.
        tables = [m._meta.db_table for m in apps.get_app_config("django_ultjobs").get_models()
                  if m._meta.managed and not m._meta.proxy]

        def truncate() -> None:
            with connection.cursor() as cur:
                cur.execute(f"TRUNCATE {', '.join(tables)} CASCADE")

        self.db(truncate)

    @property
    def runs_dir(self) -> Path:
        return self.scenario_dir / "runs"

    def end(self) -> None:
        """Stop every worker of the scenario (SIGTERM, then SIGKILL past the grace)."""
        for worker in self.workers:
            if worker.alive():
                worker.popen.send_signal(signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.popen.kill()
                worker.popen.wait()
        self.workers = []

    # -- workers -----------------------------------------------------------------------------

    def worker_env(self, port: int | None = None) -> dict[str, str]:
        env = {**os.environ, **self.cluster.env(DATABASE),
               "DJANGO_SETTINGS_MODULE": "benchmarks.chaos.settings",
               "PYTHONPATH": str(REPO), "CHAOS_RUNS_DIR": str(self.runs_dir)}
        if port is not None:
            env["CHAOS_PG_PORT"] = str(port)
        return env

    def start_worker(self, *flags: str, threads: int = 4, defaults: bool = True,
                     port: int | None = None, env: dict[str, str] | None = None
                     ) -> WorkerProcess:
        """Start one ``runjobworker`` process (its output to a log file of its own), connected
        to the cluster or to ``port`` (a proxy in front of it), ``env`` added to its
        environment."""
        worker_id = f"chaos-{uuid4().hex[:8]}"
        log = self.scenario_dir / f"{worker_id}.log"
        cmd = [sys.executable, "-m", "django", "runjobworker", "--worker-id", worker_id,
               "--threads", str(threads), *(WORKER_FLAGS if defaults else ()), *flags]
        with open(log, "wb") as out:
            popen = subprocess.Popen(cmd, cwd=REPO, env={**self.worker_env(port), **(env or {})},
                                     stdout=out, stderr=subprocess.STDOUT)
        worker = WorkerProcess(worker_id, popen, log)
        self.workers.append(worker)
        return worker

    def start_fleet(self, count: int, threads: int = 4, port: int | None = None,
                    flags: tuple[str, ...] = ()) -> list[WorkerProcess]:
        fleet = [self.start_worker(*flags, threads=threads, port=port) for _ in range(count)]
        self.wait_registered(fleet)
        return fleet

    def wait_registered(self, fleet: Iterable[WorkerProcess], timeout: float = 60.0) -> None:
        from django_ultjobs.models import Worker

        ids = [w.worker_id for w in fleet]
        self.wait(lambda: Worker.objects.filter(id__in=ids).count() == len(ids), timeout,
                  f"workers {ids} to register")

    def kill(self, worker: WorkerProcess) -> float:
        """SIGKILL ``worker``: no ``finally`` runs, nothing is settled or handed back."""
        worker.popen.send_signal(signal.SIGKILL)
        worker.popen.wait()
        return time.time()

    def logs(self) -> str:
        return "\n".join(w.log.read_text(errors="replace") for w in self.workers
                         if w.log.exists())

    # -- the database ------------------------------------------------------------------------

    def db(self, query: Callable[[], T], timeout: float = 60.0) -> T:
        """Run ``query``, again on a fresh connection while the cluster is unreachable."""
        from django.db import Error, connection

        deadline = time.monotonic() + timeout
        while True:
            try:
                return query()
            except Error:
                connection.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.db(predicate)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.05)

    def statuses(self, ids: Iterable[int]) -> dict[int, str | None]:
        """Each job's status now (None: its row is gone)."""
        from django_ultjobs.models import Job

        ids = list(ids)
        found = dict(self.db(lambda: list(Job.objects.filter(id__in=ids)
                                          .values_list("id", "status"))))
        return {job_id: found.get(job_id) for job_id in ids}

    def wait_final(self, ids: Iterable[int], timeout: float) -> dict[int, str | None]:
        """Wait until no job of ``ids`` is live, or ``timeout``; the statuses then."""
        from benchmarks.chaos.measure import LIVE

        ids = list(ids)
        deadline = time.monotonic() + timeout
        while True:
            final = self.statuses(ids)
            if not any(s in LIVE for s in final.values()) or time.monotonic() > deadline:
                return final
            time.sleep(0.1)

    def attempt_rows(self, ids: Iterable[int]) -> list[tuple[int, int, str, str]]:
        """Every attempt of ``ids``: the rows, and the first attempts their jobs' rows hold."""
        from django_ultjobs.models import AttemptRecord

        ids = list(ids)
        return self.db(lambda: list(AttemptRecord.objects.filter(job_id__in=ids).values_list(
            "job_id", "attempt", "worker_id", "outcome")))
