"""Jobs no worker knows, with real ``runjobworker`` processes on both engines
(rules 12 (unknown-job-parked), 40 (project-imports-only)).

An orphaned row (its job's code removed or renamed) is parked again and again without growing the
attempts table, fails once ``UNKNOWN_JOB_TIMEOUT`` has passed, and can then be pruned; a row whose
name is a dotted path outside the project's apps is never imported; the admin names what no
running worker knows. The park delay and the timeout are shortened through ``ULTJOBS`` in the
worker's settings (``ULTJOBS_TEST_EXTRA``), so the test waits seconds, on database conditions.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from django_ultjobs.admin.summary import jobs_summary
from django_ultjobs.models import AttemptRecord, Job, JobAttempt, Worker
from tests.conftest import REPO, WorkerProcesses, wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

FLAGS = ("--poll-interval", "0.05", "--visibility-timeout", "5", "--heartbeat-interval", "1")
#: Parks of a tenth of a second: an orphan is claimed again many times in a few seconds.
SHORT_PARK = {"UNKNOWN_JOB_DELAY": 0.1}


def _start(procs: WorkerProcesses, alias: str, extra: dict[str, Any],
           env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return procs.start(alias, *FLAGS, env={"ULTJOBS_TEST_EXTRA": json.dumps(extra),
                                           **(env or {})})


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, so the worker writes every outcome it holds before it exits."""
    proc.terminate()
    assert proc.wait(30) == 0


def _parks_logged(procs: WorkerProcesses, job_id: int) -> int:
    return len(re.findall(rf"jobs\.worker\.unknown-job job_id={job_id} ", procs.logs()))


def _attempts(alias: str, job_id: int) -> list[JobAttempt]:
    return list(AttemptRecord.objects.using(alias).filter(job_id=job_id).order_by("id"))


def test_an_orphan_parked_again_and_again_keeps_one_attempt_row(
        alias: str, worker_processes: WorkerProcesses) -> None:
    # rule 12 (unknown-job-parked): one row per parking episode, not one per park.
    orphan = Job.objects.using(alias).create(name="no_longer_deployed", args=[1], kwargs={})
    proc = _start(worker_processes, alias, SHORT_PARK)
    wait_until(lambda: _parks_logged(worker_processes, orphan.id) >= 8, timeout=60,
               message="eight parks of the orphan")
    _stop(proc)
    parks = _parks_logged(worker_processes, orphan.id)
    (row,) = _attempts(alias, orphan.id)
    assert (row.outcome, row.attempt, row.claims) == ("suspended", 1, parks)
    assert row.error == 'no job registered as "no_longer_deployed"'
    assert row.finished_at > row.started_at  # the episode's first park, then its last
    job = Job.objects.using(alias).get(id=orphan.id)
    assert (job.status, job.attempt) == ("queued", 0)  # no attempt burned


def test_an_orphan_fails_after_the_unknown_job_timeout_and_is_then_pruned(
        alias: str, worker_processes: WorkerProcesses) -> None:
    # rule 12 (unknown-job-parked): UNKNOWN_JOB_TIMEOUT bounds the parking; the failed job is pruned
    # like any other.
    orphan = Job.objects.using(alias).create(name="renamed_away", args=[], kwargs={})
    proc = _start(worker_processes, alias, {**SHORT_PARK, "UNKNOWN_JOB_TIMEOUT": 1.5})
    wait_until(lambda: Job.objects.using(alias).get(id=orphan.id).status == "failed",
               timeout=60, message="the orphan to fail")
    _stop(proc)
    job = Job.objects.using(alias).get(id=orphan.id)
    assert job.last_error.startswith('no worker knows job "renamed_away": it was parked as '
                                     'unknown for 1.5 s (ULTJOBS["UNKNOWN_JOB_TIMEOUT"])')
    assert job.finished_at is not None
    parked, failed = _attempts(alias, orphan.id)
    assert (parked.outcome, parked.claims > 1) == ("suspended", True)
    assert (failed.outcome, failed.error) == ("failed", job.last_error)
    # The decision to fail is taken after the failing run's claim, so it is the attempt's end,
    # not its start (the claim, a few ms earlier), that lies a whole timeout after the parking.
    assert (failed.finished_at - parked.started_at).total_seconds() >= 1.5
    assert "jobs.worker.unknown-job-failed" in worker_processes.logs()
    call_command("prunejobs", "--days", "0", database=alias, stdout=open(os.devnull, "w"))  # noqa: SIM115
    assert not Job.objects.using(alias).filter(id=orphan.id).exists()
    assert not AttemptRecord.objects.using(alias).filter(job_id=orphan.id).exists()


PROBE = """\
from pathlib import Path

# Imported only if a worker imports a module no app and no JOB_MODULES entry holds.
Path(__file__).with_suffix(".imported").write_text("imported")
"""

ALLOWED = """\
from django_ultjobs import job


@job(name="ultjobs_probe_allowed.greet")
def greet(name):
    return f"hello {name}"
"""


def test_a_worker_imports_no_module_outside_the_apps_and_job_modules(
        alias: str, worker_processes: WorkerProcesses, tmp_path: Path) -> None:
    # rule 40 (project-imports-only): a stored name is data; only the project's own modules are
    # imported for it.
    (tmp_path / "ultjobs_probe_import.py").write_text(PROBE)
    (tmp_path / "ultjobs_probe_allowed.py").write_text(ALLOWED)
    names = ["this.zen", "ultjobs_probe_import.anything", "os.system"]
    rows = [Job.objects.using(alias).create(name=name, args=["echo pwned"], kwargs={})
            for name in names]
    allowed = Job.objects.using(alias).create(name="ultjobs_probe_allowed.greet",
                                              args=["you"], kwargs={})
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    proc = _start(worker_processes, alias, {"JOB_MODULES": ["ultjobs_probe_allowed"]}, env)
    wait_until(lambda: all(_attempts(alias, r.id) for r in rows)
               and Job.objects.using(alias).get(id=allowed.id).status == "succeeded",
               timeout=60, message="every row parked, and the allowed job run")
    _stop(proc)
    for r in rows:
        (parked,) = _attempts(alias, r.id)
        assert (parked.outcome, parked.error) == ("suspended",
                                                  f'no job registered as "{r.name}"')
    assert not (tmp_path / "ultjobs_probe_import.imported").exists()
    logs = worker_processes.logs()
    assert "Beautiful is better than ugly" not in logs  # what importing `this` prints
    assert "jobs.registry.not-importable job=this.zen" in logs
    assert Job.objects.using(alias).get(id=allowed.id).result == "hello you"


def test_the_admin_names_queued_jobs_no_running_worker_knows(
        alias: str, worker_processes: WorkerProcesses) -> None:
    # rule 12 (unknown-job-parked): the workers say which jobs they know; the summary names the
    # rest.
    for name in ("add", "gone_one", "gone_two"):
        Job.objects.using(alias).create(name=name, args=[1, 2], kwargs={},
                                        visible_at="2999-01-01T00:00:00Z")
    proc = _start(worker_processes, alias, {})
    wait_until(lambda: Worker.objects.using(alias).filter(stopped_at__isnull=True).exists(),
               timeout=60, message="the worker to register")
    (worker,) = Worker.objects.using(alias).all()
    assert "add" in worker.jobs and "gone_one" not in worker.jobs
    assert jobs_summary(alias).unknown_jobs == ["gone_one", "gone_two"]
    _stop(proc)
    # No running worker: nothing to compare with, so nothing is flagged.
    assert jobs_summary(alias).unknown_jobs == []
