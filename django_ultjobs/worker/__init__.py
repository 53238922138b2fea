"""The worker: claim loop, executor threads, one ticker, one completer."""

from __future__ import annotations

import warnings
from typing import Any

from .options import WorkerOptions
from .worker import WorkerProcess

__all__ = ["WorkerOptions", "WorkerProcess"]


def __getattr__(name: str) -> Any:
    # ``Worker`` was this class's first name; it is the model's name (``models.Worker``, the row
    # a process keeps fresh), so the process class became ``WorkerProcess``.
    if name == "Worker":
        warnings.warn("django_ultjobs.worker.Worker is deprecated: use WorkerProcess",
                      DeprecationWarning, stacklevel=2)
        return WorkerProcess
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
