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
from typing import Any

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


def run_script(script: str, tmp_path: Path
               ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run ``script`` in a fresh interpreter with the test settings, no OpenTelemetry variable
    and a SQLite database of its own; return the finished process and the JSON it printed last."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "ULTJOBS_")) and k != "DJANGO_SETTINGS_MODULE"}
    env.update({
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "ULTJOBS_TEST_TMP": str(tmp_path),  # a fresh SQLite database, tests.settings' default
        "PYTHONPATH": str(REPO),
    })
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, timeout=60,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done, json.loads(done.stdout.strip().splitlines()[-1])


def test_without_an_sdk_jobs_run_and_nothing_is_traced(tmp_path: Path) -> None:
    # rule 14 (trace-never-fails), and the API-only promise: no SDK, no exporter, no error, no
    # traceparent stored.
    done, report = run_script(SCRIPT, tmp_path)
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


LOOKUPS_SCRIPT = r"""
import json, threading
import django
django.setup()
from django.core.management import call_command
call_command("migrate", database="default", verbosity=0)

import opentelemetry.metrics as otel_metrics
import opentelemetry.trace as otel_trace
from django_ultjobs import job
from django_ultjobs.models import Job
from django_ultjobs.worker.dispatch import Dispatcher
from tests.tracing import jobs


@job(name="tracing_async_noop", max_attempts=1)
async def async_noop() -> str:
    return "async"


lock = threading.Lock()
lookups = {"tracer": {}, "meter": {}}
claims = [0]


def counted(kind, lookup):
    def wrapper():
        thread = threading.current_thread().name
        thread = "executor" if thread.startswith(("ultjobs-exec-", "ultjobs-async")) else thread
        with lock:
            lookups[kind][thread] = lookups[kind].get(thread, 0) + 1
        return lookup()
    return wrapper


def dispatch(self, claimed, *args, _real=Dispatcher.dispatch, **kwargs):
    claims[0] += 1
    return _real(self, claimed, *args, **kwargs)


for _ in range(48):
    jobs.child.enqueue()
    async_noop.enqueue()
otel_trace.get_tracer_provider = counted("tracer", otel_trace.get_tracer_provider)
otel_metrics.get_meter_provider = counted("meter", otel_metrics.get_meter_provider)
Dispatcher.dispatch = dispatch
call_command("runjobworker", database="default", burst=True, threads=8, poll_interval=0.01)
print(json.dumps({
    "statuses": sorted(set(Job.objects.values_list("status", flat=True))),
    "runs": Job.objects.count(),
    "lookups": lookups,
    "claims": claims[0],
}))
"""


def test_without_an_sdk_runs_look_the_providers_up_once_per_claim(tmp_path: Path) -> None:
    # Until a provider is set the API reads an environment variable at every lookup, a fifth of
    # a no-op run's Python: the worker looks both providers up once
    # for each claim's runs, and no run on an executor thread or the async lane looks again.
    _, report = run_script(LOOKUPS_SCRIPT, tmp_path)
    assert report["statuses"] == ["succeeded"] and report["runs"] == 96
    for kind in ("tracer", "meter"):
        assert report["lookups"][kind].get("executor", 0) == 0, report
    claims = report["claims"]
    assert 0 < claims < 96
    # The claim loop: once when the worker is built, once for each claim's runs.
    assert report["lookups"]["tracer"].get("MainThread", 0) <= claims + 1, report


SET_LATER_SCRIPT = r"""
import json, threading, time
import django
django.setup()
from django.core.management import call_command
call_command("migrate", database="default", verbosity=0)

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from django_ultjobs.models import Job
from django_ultjobs.worker.options import WorkerOptions
from django_ultjobs.worker.worker import WorkerProcess
from tests.tracing import jobs


def succeeded(job_id):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if Job.objects.get(id=job_id).status == "succeeded":
            return True
        time.sleep(0.02)
    return False


worker = WorkerProcess(WorkerOptions(database="default", threads=2, poll_interval=0.02))
thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
thread.start()
before = jobs.noop.enqueue()
first = succeeded(before.id)
exporter = InMemorySpanExporter()
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(tracer_provider)
reader = InMemoryMetricReader()
otel_metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
after = jobs.noop.enqueue()
second = succeeded(after.id)
worker.request_stop()
thread.join(30)
data = reader.get_metrics_data()
print(json.dumps({
    "succeeded": [first, second],
    "spans": [(span.name, span.attributes.get("job.id")) for span in exporter.get_finished_spans()],
    "metrics": sorted({m.name for rm in data.resource_metrics for sm in rm.scope_metrics
                       for m in sm.metrics}),
    "ids": [before.id, after.id],
}))
"""


def test_providers_set_while_a_worker_runs_count_from_its_next_claim(tmp_path: Path) -> None:
    # The worker looks the providers up for each claim's runs (rule 70 (no-sdk-no-metrics)): one
    # started with none traces and measures the runs it claims after a site sets them.
    _, report = run_script(SET_LATER_SCRIPT, tmp_path)
    assert report["succeeded"] == [True, True]
    after = report["ids"][1]
    assert [attributes for name, attributes in report["spans"]
            if name == "job.tracing_noop"] == [after]
    assert "ultjobs.job.wait" in report["metrics"]
