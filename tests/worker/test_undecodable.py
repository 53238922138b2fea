"""Rule 15 (undecodable-row-fails-alone): a claimed row whose arguments cannot be decoded fails
alone; its batch runs at once.

The rows are written as another producer could have written them (raw SQL), then claimed by a
real Worker together with good rows in one claim. The lease is long (60 s) on purpose: a claim
that raised after its UPDATE committed would leave the good rows running under nobody's
heartbeat until it lapsed, so "they ran" within the test's wait means "they ran at once".
"""

from __future__ import annotations

import logging
import subprocess
from typing import Any

import pytest
from django.db import connections

from django_ultjobs.models import AttemptRecord, Job
from tests.conftest import REPO, running_worker, wait_until, worker_command, worker_env
from tests.hostile import nested, write_raw_args
from tests.testapp.jobs import add

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

#: A lease no test waits out: the good rows must run in the claim that took them.
LONG_LEASE = {"visibility_timeout": 60.0, "heartbeat_interval": 0.5, "threads": 4}


def _bad_rows(alias: str) -> list[dict[str, Any]]:
    """What each engine lets a raw writer store that this Python cannot decode.

    SQLite's own JSON check refuses nesting past 2,000 levels, PostgreSQL's jsonb takes 3,000;
    Python's reader gives up near 1,000 (RecursionError) and at integers past 4,300 digits.
    """
    rows: list[dict[str, Any]] = [{"text": "[" + "9" * 5000 + "]", "why": "ValueError"}]
    if connections[alias].vendor == "postgresql":
        rows.append({"text": nested(3000), "why": "nest deeper"})
    else:
        rows.append({"text": nested(1500), "why": "nest deeper"})
        rows.append({"hex_bytes": "5b22ff225d", "why": "not UTF-8"})  # ["\xff"]
    return rows


def test_an_undecodable_row_fails_alone_and_the_rest_of_its_claim_runs_at_once(
        alias: str, caplog: pytest.LogCaptureFixture) -> None:
    # rule 15 (undecodable-row-fails-alone)
    caplog.set_level(logging.ERROR, logger="django_ultjobs")
    bad = {}
    for spec in _bad_rows(alias):  # first: the worker's first claim (4 rows) takes them all
        job_id = add.enqueue(0, 0).id
        write_raw_args(alias, job_id, spec.get("text"), hex_bytes=spec.get("hex_bytes"))
        bad[job_id] = spec["why"]
    good = [add.enqueue(i, 1).id for i in range(3)]
    everything = [*good, *bad]
    jobs = Job.objects.using(alias)
    with running_worker(alias, **LONG_LEASE):
        wait_until(lambda: jobs.filter(id__in=everything,
                                       status__in=["succeeded", "failed"]).count()
                   == len(everything), message="every row of the claims settled")
    assert dict(jobs.filter(id__in=good).values_list("id", "result")) == {
        job_id: i + 1 for i, job_id in enumerate(good)}
    for job_id, why in bad.items():
        # Not the whole row: the ORM cannot load these args either.
        status, attempt_no, error = jobs.filter(id=job_id).values_list(
            "status", "attempt", "last_error").get()
        assert (status, attempt_no) == ("failed", 1), job_id
        assert error.startswith("arguments cannot be decoded: the stored args ")
        assert why in error
        assert "failed without a retry" in error
        (attempt,) = AttemptRecord.objects.using(alias).filter(job_id=job_id)
        assert (attempt.attempt, attempt.outcome, attempt.error) == (1, "failed", error)
    logged = {getattr(r, "ultjobs", {}).get("job_id") for r in caplog.records
              if getattr(r, "ultjobs_event", None) == "jobs.worker.undecodable"}
    assert logged == set(bad)


def test_a_runjobworker_process_fails_the_undecodable_row_and_drains_the_rest(
        pg_alias: str) -> None:
    # rule 15 (undecodable-row-fails-alone), in a real worker process: its first claim takes the
    # 3,000-deep row with three good ones. Before, that claim raised, --burst found nothing more
    # runnable (the four rows held for the 60 s lease) and exited with three good jobs still
    # "running".
    bad = add.enqueue(0, 0).id
    write_raw_args(pg_alias, bad, nested(3000))
    good = [add.enqueue(i, 1).id for i in range(3)]
    proc = subprocess.run(
        worker_command(pg_alias, "--burst", "--threads", "4", "--visibility-timeout", "60"),
        env=worker_env(pg_alias), cwd=REPO, capture_output=True, text=True, timeout=120,
        check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    statuses = dict(Job.objects.using(pg_alias).values_list("id", "status"))
    assert statuses == {bad: "failed", **dict.fromkeys(good, "succeeded")}, proc.stderr
    assert "jobs.worker.undecodable" in proc.stderr + proc.stdout
    assert "claim-failed" not in proc.stderr + proc.stdout
