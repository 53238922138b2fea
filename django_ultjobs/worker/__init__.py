"""The worker: claim loop, executor threads, one ticker, one completer."""

from .options import WorkerOptions
from .worker import Worker

__all__ = ["Worker", "WorkerOptions"]
