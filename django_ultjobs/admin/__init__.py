"""The jobs admin: in-flight jobs, held fleet slots, lost-slot cancellations, workers,
schedules, paused queues, actions.

Registered on Django's default admin site when ``django.contrib.admin`` discovers this module.
Every page reads the jobs database (``ULTJOBS["DATABASE"]``) and stays fast on a table of
millions of rows: no full counts, no sorting or filter choices that scan the table.
"""

from __future__ import annotations

from .groups import BatchAdmin, WorkflowAdmin
from .job_actions import cancel_selected, retry_selected
from .jobs import InFlightJobAdmin, JobAdmin
from .queues import QueuePauseAdmin
from .schedules import JobScheduleAdmin
from .slots import HeldSlotAdmin, LostSlotCancellationAdmin
from .workers import WorkerAdmin

__all__ = [
    "BatchAdmin",
    "HeldSlotAdmin",
    "InFlightJobAdmin",
    "JobAdmin",
    "JobScheduleAdmin",
    "LostSlotCancellationAdmin",
    "QueuePauseAdmin",
    "WorkerAdmin",
    "WorkflowAdmin",
    "cancel_selected",
    "retry_selected",
]
