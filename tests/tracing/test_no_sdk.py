"""With no SDK configured, tracing costs nothing and breaks nothing (docs/tracing.md, "Cost").

A fresh interpreter (this test process has the tests' SDK installed) with the test settings and a
database of its own: it enqueues jobs, one from inside a job, and runs them with a burst worker.
The API's default provider stays in place, no SDK module is ever imported, nothing is stored as a
traceparent, and the jobs succeed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SCRIPT = r"""
import json, sys
import django
django.setup()
from django.core.management import call_command
call_command("migrate", database="default", verbosity=0)

from opentelemetry import trace
from django_ultjobs.models import Job
from tests.tracing import jobs

parent, plain = jobs.parent.enqueue(), jobs.noop.enqueue()
call_command("runjobworker", database="default", burst=True, threads=2, poll_interval=0.01)
rows = list(Job.objects.order_by("id").values("name", "status", "traceparent", "tracestate",
                                              "enqueued_by"))
print(json.dumps({
    "provider": type(trace.get_tracer_provider()).__name__,
    "current_span_valid": trace.get_current_span().get_span_context().is_valid,
    "sdk_imported": sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk")),
    "instrumentation_imported": "opentelemetry.instrumentation.django" in sys.modules,
    "parent_id": parent.id,
    "rows": rows,
}))
"""


def test_without_an_sdk_jobs_run_and_nothing_is_traced(tmp_path: Path) -> None:
    # rule 14, and the API-only promise: no SDK, no exporter, no error, no traceparent stored.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "ULTJOBS_")) and k != "DJANGO_SETTINGS_MODULE"}
    env.update({
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "ULTJOBS_TEST_TMP": str(tmp_path),  # a fresh SQLite database, tests.settings' default
        "PYTHONPATH": str(REPO),
    })
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, timeout=60,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["provider"] == "ProxyTracerProvider"  # the API's default: no SDK configured
    assert report["sdk_imported"] == []
    assert report["instrumentation_imported"] is False
    assert report["current_span_valid"] is False
    rows = report["rows"]
    assert [(r["name"], r["status"]) for r in rows] == [
        ("tracing_parent", "succeeded"), ("tracing_noop", "succeeded"),
        ("tracing_child", "succeeded")]
    assert {(r["traceparent"], r["tracestate"]) for r in rows} == {("", "")}
    assert rows[2]["enqueued_by"] == f"job:{report['parent_id']}"
    assert "Traceback" not in done.stderr
