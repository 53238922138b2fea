"""A running worker's row outlives any prune, and comes back whole when it is deleted
(rule 106 (live-row-kept)).

Real ``runjobworker`` processes and real ``prunejobs`` and ``ultjobs`` processes, on SQLite and
PostgreSQL: the row is what ``ultjobs stats``, the admin's workers page and a job page's
"overrunning" flag read, and only the worker's ticks keep it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from django_ultjobs.admin.job_page import overrunning_on
from django_ultjobs.models import Job, Worker
from django_ultjobs.store.retention import prune
from tests.acceptance.fleet import Fleet
from tests.conftest import REPO, WorkerProcesses, worker_env
from tests.testapp.jobs import overrunning

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases="__all__"),
]

#: The fleet's heartbeat interval (``tests/acceptance/fleet.py``).
HEARTBEAT = 0.5
#: The columns a worker writes and the readers of its row show.
COLUMNS = ("hostname", "pid", "threads", "queues", "started_at", "visibility_timeout",
           "heartbeat_interval", "jobs", "stopped_at")


def manage(alias: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m django <args> --database alias`` as its own process, on the test database."""
    return subprocess.run([sys.executable, "-m", "django", *args, "--database", alias],
                          cwd=REPO, env=worker_env(alias), capture_output=True, text=True,
                          timeout=120)


def row_of(alias: str, worker_id: str) -> dict[str, object] | None:
    return Worker.objects.using(alias).filter(id=worker_id).values().first()


def test_a_prune_keeps_a_running_worker_and_its_deleted_row_comes_back_whole(
        alias: str, worker_processes: WorkerProcesses) -> None:
    """rule 106 (live-row-kept): ``prunejobs --days 0`` beside a running worker leaves its row as it
    was; deleted by hand, the row is written again at the worker's next heartbeat, with every column
    it had (its start, its job names, its run in flight and the body overrunning its timeout), so
    ``ultjobs stats`` and the job's page show the worker again."""
    fleet = Fleet(worker_processes, alias)
    worker_id = fleet.start("live", "--threads", "2", "--cancel-wait", "0.5")
    fleet.wait_registered(worker_id)
    stuck = overrunning.using(timeout=0.5).enqueue(seconds=120.0)
    fleet.wait(lambda: (row_of(alias, worker_id) or {}).get("overrunning"), 30,
               "the row to list the overrunning run")
    before = row_of(alias, worker_id)
    assert before is not None

    pruned = manage(alias, "prunejobs", "--days", "0")
    assert pruned.returncode == 0, pruned.stderr
    assert ", 0 workers finished or last seen" in pruned.stdout, pruned.stdout
    kept = row_of(alias, worker_id)
    assert kept is not None, "the running worker's row was pruned"
    assert {k: kept[k] for k in COLUMNS} == {k: before[k] for k in COLUMNS}

    Worker.objects.using(alias).filter(id=worker_id).delete()
    deleted = time.monotonic()
    back = fleet.wait(lambda: row_of(alias, worker_id), 10, "the row to be written again")
    took = time.monotonic() - deleted
    assert {k: back[k] for k in COLUMNS} == {k: before[k] for k in COLUMNS}
    assert back["pid"] == fleet.pid(worker_id)
    assert back["in_flight"] == 1
    assert [e["job_id"] for e in back["overrunning"]] == [stuck.id]
    # One tick, give or take a loaded machine's scheduling.
    assert took < HEARTBEAT + 2.0, took
    assert fleet.events("jobs.worker.row-restored", worker_id=worker_id)

    stats = manage(alias, "ultjobs", "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    [listed] = [w for w in json.loads(stats.stdout)["workers"] if w["worker_id"] == worker_id]
    assert (listed["state"], listed["runs"]) == ("running", 1)
    assert "overrunning" in overrunning_on(Job.objects.using(alias).get(id=stuck.id))


def test_a_silent_or_stopped_worker_is_still_pruned(alias: str) -> None:
    """rule 106 (live-row-kept): alive is judged by each worker's own visibility timeout on the
    database's clock: a row silent past it, or stopped, goes at ``--days 0``; one heard from within
    it stays."""
    now = timezone.now()
    workers = Worker.objects.using(alias)
    workers.create(id="stopped", hostname="h", pid=1, threads=1, last_seen_at=now,
                   stopped_at=now - timedelta(seconds=1), visibility_timeout=30)
    workers.create(id="silent", hostname="h", pid=2, threads=1,
                   last_seen_at=now - timedelta(seconds=31), visibility_timeout=30)
    workers.create(id="slow-lease", hostname="h", pid=3, threads=1,
                   last_seen_at=now - timedelta(seconds=31), visibility_timeout=120)
    workers.create(id="old-row", hostname="h", pid=4, threads=1,
                   last_seen_at=now - timedelta(days=2), visibility_timeout=None)
    workers.create(id="ticking", hostname="h", pid=5, threads=1, last_seen_at=now,
                   visibility_timeout=None)
    assert prune(older_than=timedelta(0), using=alias, dry_run=True).workers == 3
    assert prune(older_than=timedelta(0), using=alias).workers == 3
    assert set(workers.values_list("id", flat=True)) == {"slow-lease", "ticking"}


def test_a_worker_restarted_under_its_id_writes_its_own_start(alias: str) -> None:
    """rule 106 (live-row-kept): a fixed ``--worker-id`` (a StatefulSet's pod name, a systemd unit's
    host) is one row across restarts; each new process writes its own start there, as its pid, not
    the first process's start for ever."""
    worker_id = "fixed-id-restarted"
    starts = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "django", "runjobworker", "--database",
                               alias, "--burst", "--worker-id", worker_id],
                              cwd=REPO, env=worker_env(alias), capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        row = row_of(alias, worker_id)
        assert row is not None and row["stopped_at"] is not None
        starts.append((row["started_at"], row["stopped_at"], row["pid"]))
    (first_start, first_stop, first_pid), (second_start, _, second_pid) = starts
    assert second_pid != first_pid
    assert second_start > first_stop >= first_start, starts
