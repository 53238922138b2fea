"""A body in a child process of ``--pool process`` sees what a body on a thread sees: its trace
(the enqueuing span's), its context (steps, progress, cancel state) and the run hooks around it,
fired in the child (rule 140 (hard-stop)'s pool keeps rule 72 (paired-run-hooks))."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

from django_ultjobs.models import Job, JobStep
from django_ultjobs.signals import job_finished, job_started
from tests.conftest import running_worker, wait_until
from tests.testapp.pool_jobs import context_in_child

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_a_body_in_a_child_keeps_its_trace_context_and_hooks(pg_alias: str,
                                                            tmp_path: Path) -> None:
    alias = pg_alias
    hooks = tmp_path / "hooks"

    def started(sender: Any, **kwargs: Any) -> None:
        with open(hooks, "a") as f:
            f.write(f"started {os.getpid()}\n")

    def finished(sender: Any, outcome: str, **kwargs: Any) -> None:
        with open(hooks, "a") as f:
            f.write(f"finished {os.getpid()} {outcome}\n")

    job_started.connect(started, dispatch_uid="pool-test-started")
    job_finished.connect(finished, dispatch_uid="pool-test-finished")
    try:
        with trace.get_tracer("tests.tracing").start_as_current_span("test.caller") as caller:
            job = context_in_child.enqueue()
        with running_worker(alias, pool="process", processes=1):
            wait_until(lambda: Job.objects.using(alias).get(id=job.id).status == "succeeded",
                       message="the job to run in a child")
    finally:
        job_started.disconnect(dispatch_uid="pool-test-started")
        job_finished.disconnect(dispatch_uid="pool-test-finished")
    row = Job.objects.using(alias).get(id=job.id)
    result = row.result
    assert result["pid"] != os.getpid()
    assert result["trace_id"] == f"{caller.get_span_context().trace_id:032x}"
    assert result["step"] == result["pid"] and result["cancelled"] is False
    assert JobStep.objects.using(alias).filter(job_id=job.id, name="first").exists()
    assert row.progress["done"] == 2 and row.progress["message"] == "done"
    assert hooks.read_text().splitlines() == [f"started {result['pid']}",
                                              f"finished {result['pid']} succeeded"]
