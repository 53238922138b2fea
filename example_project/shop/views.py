"""Checkout (queues the receipt in the order's own transaction) and a job status endpoint."""

from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, HttpResponseBadRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from django_ultjobs.models import Job

from .jobs import send_receipt
from .models import Order


@csrf_exempt  # an API endpoint for the example; a real shop keeps its CSRF protection
@require_POST
def checkout(request: HttpRequest) -> JsonResponse | HttpResponseBadRequest:
    """POST ``{"email": ..., "total_cents": ...}`` (JSON or form): create an order, queue its
    receipt. Both rows commit together or not at all."""
    if request.content_type == "application/json":
        try:
            data = json.loads(request.body or b"{}")
        except ValueError:
            return HttpResponseBadRequest("body is not JSON")
    else:
        data = request.POST
    email = str(data.get("email") or "")
    try:
        total_cents = int(data.get("total_cents", 0))
    except (TypeError, ValueError):
        return HttpResponseBadRequest("total_cents must be a whole number")
    if "@" not in email or total_cents < 0:
        return HttpResponseBadRequest("email and a non-negative total_cents are required")

    with transaction.atomic():
        order = Order.objects.create(email=email, total_cents=total_cents)
        # Same transaction: if anything below raises, the order AND its job roll back, so a
        # worker never sees a job for an order that does not exist.
        queued = send_receipt.enqueue(order.id)
    return JsonResponse({"order_id": order.id, "job_id": queued.id}, status=201)


@require_GET
def job_status(request: HttpRequest, job_id: int) -> JsonResponse:
    """GET the state of one job: status, attempts, result or last error line."""
    job = get_object_or_404(Job, pk=job_id)
    last_error = job.last_error.strip().splitlines()[-1] if job.last_error.strip() else ""
    return JsonResponse({
        "id": job.id,
        "name": job.name,
        "status": job.status,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "result": job.result,
        "last_error": last_error,
        "created_at": job.created_at.isoformat() if job.created_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    })
