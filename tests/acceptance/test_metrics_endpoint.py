"""A real ``runjobworker`` process with the example's Prometheus exporter: its ``/metrics``
port serves what it ran and, as the fleet's sampler, the gauges (rules 70 (no-sdk-no-metrics),
71 (gauges-one-reader); docs/operations.md)."""

from __future__ import annotations

import json
import re
import signal
import socket
import urllib.request

import pytest

from django_ultjobs.models import Job, JobStatus
from tests.conftest import WorkerProcesses, wait_until
from tests.testapp.jobs import add

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
            return reply.read().decode()
    except OSError:
        return ""


def _value(text: str, metric: str, **labels: str) -> float | None:
    """The value of the first sample of ``metric`` whose labels include ``labels``."""
    for line in text.splitlines():
        match = re.fullmatch(rf"{metric}\{{(.*)\}} (\S+)", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            return float(match.group(2))
    return None


def test_a_worker_process_serves_its_metrics(alias, worker_processes: WorkerProcesses):
    for n in range(3):
        add.using(queue="unserved").enqueue(n, n)
    rows = [add.enqueue(n, 1) for n in range(4)]
    port = _free_port()
    proc = worker_processes.start(alias, "--threads", "2", env={
        "ULTJOBS_TEST_OTEL_METRICS_EXPORTER": "prometheus",
        "ULTJOBS_METRICS_PORT": str(port),
        "ULTJOBS_TEST_EXTRA": json.dumps({"GAUGE_INTERVAL": 1.0}),
    })
    try:
        wait_until(lambda: Job.objects.using(alias).filter(
            pk__in=[r.id for r in rows], status=JobStatus.SUCCEEDED).count() == 4,
            timeout=60, message="the worker ran the four jobs")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{worker_processes.logs()}") from None
    text = wait_until(
        lambda: (t := _scrape(port)) and _value(t, "ultjobs_jobs_finished_total", job_name="add",
                                                outcome="succeeded") == 4.0
        and _value(t, "ultjobs_queue_depth", queue="unserved") == 3.0 and t,
        timeout=30, message=f"the scrape\n{worker_processes.logs()}")
    assert _value(text, "ultjobs_job_duration_seconds_count", job_name="add") == 4.0
    assert _value(text, "ultjobs_job_wait_seconds_count", job_name="add") == 4.0
    assert _value(text, "ultjobs_queue_oldest_age_seconds", queue="unserved") >= 0
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
