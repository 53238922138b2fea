"""The shop's jobs. ``django_ultjobs`` imports every installed app's ``jobs.py`` at startup, so the
web process that enqueues and the worker that runs see the same registry.
"""

from __future__ import annotations

import time
from typing import Any

from django_ultjobs import JobContext, job

from .models import Order


@job(takes_context=True, max_attempts=5)
def send_receipt(ctx: JobContext, order_id: int) -> dict[str, Any]:
    """The main job: "send" the receipt, mark the order, then queue the charge of its card.

    Both pieces are durable steps, so a retry neither mails the receipt twice nor queues a second
    charge (``atomic=True``: the charge's row commits with the step's record, or neither does).
    Traced, each step is a child span of ``job.send_receipt``, and ``job.charge_card`` nests under
    the step that queued it, in the trace of the checkout request (docs/tracing.md).
    """
    order = Order.objects.get(pk=order_id)
    # A real shop would call its mail provider here. Marking an already-sent order again
    # changes nothing, so even a step that ran but was not recorded is safe to run again.
    sent_to = ctx.step("send", lambda: _mark_receipt_sent(order))
    charge_id = ctx.step("queue_charge", lambda: charge_card.enqueue(order.pk).id, atomic=True)
    return {"order_id": order.pk, "sent_to": sent_to, "charge_job": charge_id}


def _mark_receipt_sent(order: Order) -> str:
    Order.objects.filter(pk=order.pk, status=Order.Status.PLACED).update(
        status=Order.Status.RECEIPT_SENT
    )
    return order.email


@job(takes_context=True, max_attempts=3)
def charge_card(ctx: JobContext, order_id: int) -> dict[str, Any]:
    """Charge an order (queued by ``send_receipt``). Its ``capture`` step is memoised: a retry
    after the payment provider said yes does not charge the card again."""
    ctx.raise_if_cancelled()
    charged = ctx.step("capture", lambda: _capture(order_id))
    return {"order_id": order_id, "charged": charged, "attempt": ctx.attempt}


def _capture(order_id: int) -> bool:
    # A real shop would call its payment provider here, with the job id as idempotency key.
    updated = Order.objects.filter(pk=order_id).exclude(status=Order.Status.PAID).update(
        status=Order.Status.PAID
    )
    return bool(updated)


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


@job(takes_context=True, max_attempts=1)
def summarize_receipts(ctx: JobContext) -> dict[str, Any]:
    """A batch's callback (docs/workflows.md): runs once every receipt of its batch succeeded,
    and reads what they returned."""
    sent = list(ctx.dependency_results())
    batch = ctx.batch
    return {"batch": batch.pk if batch else None, "receipts": len(sent)}


@job(takes_context=True, max_attempts=1)
def archive_step(ctx: JobContext, step: str) -> dict[str, Any]:
    """A link of a chain: runs once the step before it succeeded, and says which one that was."""
    before = ctx.dependency_results()
    return {"step": step, "after": before[0]["step"] if before else None}


@job(takes_context=True, timeout=1.0, max_attempts=1)
def stuck_render(ctx: JobContext) -> None:
    """A body that never looks at its cancellation, as a C call or a hung socket would not: on a
    thread it would run for ever. ``runjobworker --pool process`` ends it by killing its child
    process ``--cancel-wait`` seconds after its timeout."""
    while True:
        pass
