"""The shop's jobs. ``django_ultjobs`` imports every installed app's ``jobs.py`` at startup, so the
web process that enqueues and the worker that runs see the same registry.
"""

from __future__ import annotations

import time
from typing import Any

from django_ultjobs import job
from django_ultjobs.context import JobContext

from .models import Order


@job(max_attempts=5)
def send_receipt(order_id: int) -> dict[str, Any]:
    """The main job: "send" the receipt and mark the order. Returns a small JSON result."""
    order = Order.objects.get(pk=order_id)
    # A real shop would call its mail provider here. Retries run this again, so the update is
    # idempotent: marking an already-sent order again changes nothing.
    Order.objects.filter(pk=order.pk).update(status=Order.Status.RECEIPT_SENT)
    return {"order_id": order.pk, "sent_to": order.email}


@job(takes_context=True, max_attempts=3)
def charge_card(ctx: JobContext, order_id: int) -> dict[str, Any]:
    """Charge an order. With ``OTEL_TRACES_EXPORTER=console`` its span ``job.charge_card`` is a
    child of the request that queued it (the checkout's trace id)."""
    ctx.raise_if_cancelled()
    updated = Order.objects.filter(pk=order_id, status=Order.Status.PLACED).update(
        status=Order.Status.PAID
    )
    return {"order_id": order_id, "charged": bool(updated), "attempt": ctx.attempt}


@job(takes_context=True, max_attempts=3, backoff=0.5)
def flaky_export(ctx: JobContext, order_id: int) -> dict[str, Any]:
    """Fails on its first two attempts and succeeds on the third: retries with backoff, each
    attempt recorded in JobAttempt. ``backoff=0.5`` keeps the demo quick (0.25-0.5 s, then
    0.5-1 s)."""
    if ctx.attempt < 3:
        raise ConnectionError(
            f"export service unavailable (simulated, attempt {ctx.attempt}/{ctx.max_attempts})"
        )
    return {"order_id": order_id, "exported_on_attempt": ctx.attempt}


@job(takes_context=True, max_attempts=1)
def slow_report(ctx: JobContext, seconds: float) -> dict[str, Any]:
    """A long job that stops promptly when cancelled (admin cancel, lost lease, worker drain):
    cancellation is cooperative, so the loop checks it."""
    started = time.monotonic()
    rows = 0
    while time.monotonic() - started < seconds:
        ctx.raise_if_cancelled()
        rows += 1
        time.sleep(0.05)
    return {"rows": rows, "seconds": round(time.monotonic() - started, 2)}
