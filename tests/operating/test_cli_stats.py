"""``ultjobs stats`` beside a real ``runjobworker``, on SQLite and PostgreSQL: a worker's runs
count from their start, not from its next heartbeat (rule 125 (bulk-cli-in-chunks))."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from django_ultjobs.models import Job, Worker
from tests.conftest import WorkerProcesses, wait_until
from tests.testapp.jobs import block_until
from tests.testapp.models import RunLog

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]


def worker_runs(alias: str) -> dict[str, int]:
    out = io.StringIO()
    call_command("ultjobs", "stats", "--json", "--database", alias, stdout=out)
    return {w["worker_id"]: w["runs"] for w in json.loads(out.getvalue())["workers"]}


def test_a_run_counts_from_its_start_not_the_next_heartbeat(
        alias: str, worker_processes: WorkerProcesses, tmp_path: Path) -> None:
    # A heartbeat every 30 s: the worker's row says 0 runs for the whole test.
    worker_processes.start(alias, "--threads", "2", "--visibility-timeout", "120",
                           "--heartbeat-interval", "30", "--poll-interval", "0.1")
    wait_until(lambda: Worker.objects.using(alias).exists(), 30, message="the worker's row")
    [worker] = Worker.objects.using(alias).values_list("id", flat=True)
    assert worker_runs(alias) == {worker: 0}
    release = tmp_path / "release"
    ids = [block_until.enqueue(str(release), label=f"r{i}").id for i in range(2)]
    wait_until(lambda: RunLog.objects.using(alias).count() == 2, 30,
               message="both runs to start")
    assert worker_runs(alias) == {worker: 2}
    release.touch()
    wait_until(lambda: set(Job.objects.using(alias).filter(id__in=ids)
                           .values_list("status", flat=True)) == {"succeeded"}, 30,
               message="both runs to finish")
    assert worker_runs(alias) == {worker: 0}
