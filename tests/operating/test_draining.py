"""A draining worker says what it waits for, with a real ``runjobworker`` process on both
engines: the first Ctrl-C says that a second one stops at once and names the runs still going,
again every few seconds (``drain_report.REPORT_INTERVAL``); the second cancels them and the
process exits, each job handed back. Every wait is on the process's output or its exit."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from django_ultjobs.models import Job
from django_ultjobs.worker.drain_report import REPORT_INTERVAL
from tests.conftest import WorkerProcesses, wait_until
from tests.testapp.jobs import block_until
from tests.testapp.models import RunLog

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]

FLAGS = ("--visibility-timeout", "10", "--heartbeat-interval", "0.5", "--poll-interval", "0.1",
         "--grace-period", "120", "--cancel-wait", "5")


def lines_of(procs: WorkerProcesses, event: str) -> list[str]:
    return [line for line in procs.logs().splitlines() if f" {event} " in line]


def test_ctrl_c_says_how_to_stop_now_and_names_the_runs_it_waits_for(
        alias: str, worker_processes: WorkerProcesses, tmp_path: Path) -> None:
    never = tmp_path / "never"
    ids = [block_until.enqueue(str(never), label=f"drain-{i}").id for i in range(2)]
    # As a new project runs it: no LOGGING, the worker's own console.
    proc = worker_processes.start(alias, *FLAGS, env={"ULTJOBS_TEST_LOGGING": "none"})
    wait_until(lambda: RunLog.objects.using(alias).filter(job_id__in=ids).count() == 2, 30,
               message="both jobs running")

    proc.send_signal(signal.SIGINT)
    (draining,) = wait_until(lambda: lines_of(worker_processes, "jobs.worker.draining"), 30,
                             message="the draining line")
    assert "in_flight=2 grace_period=120.0" in draining, draining
    assert 'hint="a second Ctrl-C (SIGINT or SIGTERM) stops now: the running jobs are ' \
           'cancelled and handed back to the queue, no attempt used"' in draining, draining
    for job_id in ids:
        assert re.search(rf"#{job_id} block_until \d+\.\d s", draining), draining

    # Then, while the grace period runs, the runs by name every few seconds.
    reports = wait_until(lambda: lines_of(worker_processes, "jobs.worker.still-running"),
                         REPORT_INTERVAL * 6, message="a line naming the runs still going")
    assert "in_flight=2" in reports[0] and "grace_left=" in reports[0], reports[0]
    seconds = [float(s) for s in re.findall(r"block_until (\d+\.\d) s", reports[0])]
    assert len(seconds) == 2 and min(seconds) >= REPORT_INTERVAL - 0.5, reports[0]
    assert proc.poll() is None

    forced = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0, worker_processes.logs()
    assert time.monotonic() - forced < 10, worker_processes.logs()
    (cancelling,) = lines_of(worker_processes, "jobs.worker.cancelling-runs")
    assert 'why="stop forced"' in cancelling and "in_flight=2" in cancelling, cancelling
    # Handed back, no attempt used.
    assert set(Job.objects.using(alias).filter(id__in=ids).values_list("status", "attempt")) \
        == {("queued", 0)}
