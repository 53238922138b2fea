"""Durable records the test jobs write, so tests can see what ran, where and when."""

from django.db import models


class RunLog(models.Model):
    """One run of a test job: written when the body starts, finished when it returns."""

    job_id = models.BigIntegerField()
    attempt = models.IntegerField()
    label = models.CharField(max_length=100, blank=True, default="")
    pid = models.IntegerField()
    started_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True)

    class Meta:
        indexes = [models.Index(fields=["job_id"])]
