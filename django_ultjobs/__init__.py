"""django_ultjobs: durable background jobs for Django on the database the site already has.

```python
from django_ultjobs import job

@job(queue="default", max_attempts=5)
def send_receipt(order_id: int) -> None: ...

send_receipt.enqueue(order.id)          # inside the view's transaction
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .exceptions import (
    CancelRequestedError,
    EventTimeoutError,
    JobArgumentError,
    JobCancelledError,
    JobConfigurationError,
    JobExpiredError,
    JobOptionError,
    JobSlotLostError,
    JobTablesMissingError,
    JobTimeoutError,
    LeaseLostError,
    NonRetryable,
    StepError,
    UltJobsError,
    UniqueKeyContendedError,
    UnknownJobError,
    WorkerShutdownError,
    WorkflowError,
)

if TYPE_CHECKING:
    from .jobs.batches import Batch
    from .jobs.enqueue import bulk_enqueue
    from .jobs.registry import job
    from .jobs.spec import JobCall, JobSpec
    from .jobs.workflows import Workflow, chain
    from .runtime.context import JobContext
    from .runtime.events import send_event

__all__ = [
    "Batch",
    "CancelRequestedError",
    "EventTimeoutError",
    "JobArgumentError",
    "JobCall",
    "JobCancelledError",
    "JobConfigurationError",
    "JobContext",
    "JobExpiredError",
    "JobOptionError",
    "JobSlotLostError",
    "JobSpec",
    "JobTablesMissingError",
    "JobTimeoutError",
    "LeaseLostError",
    "NonRetryable",
    "StepError",
    "UltJobsError",
    "UniqueKeyContendedError",
    "UnknownJobError",
    "WorkerShutdownError",
    "Workflow",
    "WorkflowError",
    "bulk_enqueue",
    "chain",
    "job",
    "send_event",
]

# These import the models, so they are loaded on first use rather than at import time:
# `import django_ultjobs` must work in settings.py and before the app registry is ready.
_LAZY = {
    "Batch": "jobs.batches",
    "Workflow": "jobs.workflows",
    "chain": "jobs.workflows",
    "job": "jobs.registry",
    "bulk_enqueue": "jobs.enqueue",
    "JobSpec": "jobs.spec",
    "JobCall": "jobs.spec",
    "JobContext": "runtime.context",
    "send_event": "runtime.events",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'django_ultjobs' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{module}", __name__), name)
