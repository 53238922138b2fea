"""One model: an order, whose receipt is sent by a job queued in the same transaction."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    class Status(models.TextChoices):
        PLACED = "placed", "placed"
        PAID = "paid", "paid"
        RECEIPT_SENT = "receipt_sent", "receipt sent"

    id = models.BigAutoField(primary_key=True)
    email = models.EmailField()
    total_cents = models.PositiveIntegerField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PLACED)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"order {self.pk} ({self.email}, {self.total_cents / 100:.2f})"
