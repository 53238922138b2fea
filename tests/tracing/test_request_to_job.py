"""The example shop's checkout, traced end to end: request span → job span → steps → next job.

The real example views (``example_project.shop``, under ``/shop/`` in tests/urls.py) are driven
through the Django test client with ``opentelemetry-instrumentation-django`` on, and a real worker
runs what they queued (rule 14 (trace-never-fails)).
"""

from __future__ import annotations

import os

import pytest
from django.contrib.auth.models import User
from django.test import Client
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from django_ultjobs.models import FINISHED_STATUSES, Job
from example_project.shop.models import Order
from tests.conftest import running_worker, wait_until
from tests.tracing.conftest import Spans, hex_ids, parent_id
from tests.tracing.tree import render_tree

pytestmark = [
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.usefixtures("instrumented_django"),
]


def _checkout(client: Client) -> int:
    response = client.post("/shop/checkout/", {"email": "ada@example.com", "total_cents": 4200},
                           content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()["job_id"]


def _finished(alias: str, job_id: int) -> Job | None:
    job = Job.objects.using(alias).get(pk=job_id)
    return job if job.status in FINISHED_STATUSES else None


def _request_span(spans: Spans) -> ReadableSpan:
    (request,) = [s for s in spans.all() if s.kind == SpanKind.SERVER]
    return request


@pytest.mark.parametrize("username", ["ada", None], ids=["logged-in", "anonymous"])
def test_checkout_job_is_the_child_of_the_request_span(
        alias: str, spans: Spans, username: str | None) -> None:
    # rule 14 (trace-never-fails): span job.<name>, parent from the stored W3C traceparent, the
    # documented attributes (job.name, job.id, job.attempt, job.enqueued_by) and messaging.* ones.
    client = Client()
    if username is not None:
        client.force_login(User.objects.create_user(username))
    job_id = _checkout(client)

    request = _request_span(spans)
    trace_id, span_id = hex_ids(request)
    row = Job.objects.using(alias).get(pk=job_id)
    enqueued_by = f"user:{username}" if username else "anonymous"
    version, stored_trace, stored_span, flags = row.traceparent.split("-")
    assert (version, stored_trace, stored_span) == ("00", trace_id, span_id)
    assert int(flags, 16) & 0x01  # sampled (newer SDKs also set 0x02, "random trace id")
    assert row.enqueued_by == enqueued_by

    with running_worker(alias):
        done = wait_until(lambda: _finished(alias, job_id), message="send_receipt")
        assert done.status == "succeeded", done.last_error
        charge_id = done.result["charge_job"]
        charged = wait_until(lambda: _finished(alias, charge_id), message="charge_card")
        assert charged.status == "succeeded", charged.last_error

    job_span = spans.one("job.send_receipt")
    assert job_span.kind == SpanKind.CONSUMER
    assert job_span.context.trace_id == request.context.trace_id
    assert parent_id(job_span) == request.context.span_id
    assert job_span.parent is not None and job_span.parent.is_remote
    assert job_span.status.status_code == StatusCode.UNSET
    assert dict(job_span.attributes or {}) == {
        "job.name": "send_receipt",
        "job.id": job_id,
        "job.attempt": 1,
        "job.enqueued_by": enqueued_by,
        "job.outcome": "succeeded",
        "messaging.system": "django_ultjobs",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": str(job_id),
    }
    assert Order.objects.get(pk=done.result["order_id"]).status == Order.Status.PAID


def test_the_checkout_trace_as_a_tree(alias: str, spans: Spans) -> None:
    # rule 14 (trace-never-fails): a job enqueued by a job nests under it; docs/tracing.md shows
    # this tree (printed with timings by `pytest -s`).
    client = Client()
    client.force_login(User.objects.create_user("ada"))
    job_id = _checkout(client)
    with running_worker(alias):
        done = wait_until(lambda: _finished(alias, job_id), message="send_receipt")
        charge_id = done.result["charge_job"]
        wait_until(lambda: _finished(alias, charge_id), message="charge_card")

    request = _request_span(spans)
    send, charge = spans.one("job.send_receipt"), spans.one("job.charge_card")
    step_send, queue_charge, capture = (spans.one("step send"), spans.one("step queue_charge"),
                                        spans.one("step capture"))
    # One trace, and every span under the one before it.
    assert {s.context.trace_id for s in spans.all()} == {request.context.trace_id}
    assert [parent_id(s) for s in (send, step_send, queue_charge, charge, capture)] == [
        request.context.span_id, send.context.span_id, send.context.span_id,
        queue_charge.context.span_id, charge.context.span_id]
    assert (charge.attributes or {})["job.enqueued_by"] == f"job:{job_id}"
    assert render_tree(spans.all()) == "\n".join([
        f"{request.name}  [SERVER]",
        "└── job.send_receipt  [CONSUMER]  job.enqueued_by=user:ada  job.outcome=succeeded",
        "    ├── step send  job.step.replayed=False",
        "    └── step queue_charge  job.step.replayed=False",
        f"        └── job.charge_card  [CONSUMER]  job.enqueued_by=job:{job_id}  "
        "job.outcome=succeeded",
        "            └── step capture  job.step.replayed=False",
    ])
    if os.environ.get("ULTJOBS_PRINT_TRACE"):
        print("\n" + render_tree(spans.all(), timings=True))
