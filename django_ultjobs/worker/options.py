"""The worker's options, validated when built so a bad flag fails before anything starts."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

from ..exceptions import JobConfigurationError


def default_worker_id() -> str:
    """``<host>:<pid>:<random>``: unique across restarts, readable in the admin and the logs."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class WorkerOptions:
    """How one ``runjobworker`` process claims and runs jobs."""

    queues: tuple[str, ...] = ("default",)
    threads: int = 4
    #: Seconds a claimed job stays invisible without a heartbeat (rule 1); also the fleet slot
    #: TTL, so a dead worker frees its slot on the schedule its job is re-delivered (rule 5).
    visibility_timeout: float = 30.0
    #: Seconds between heartbeats; the timeout must leave several ticks (rule 2).
    heartbeat_interval: float = 10.0
    #: Seconds an idle worker waits between claims when nothing wakes it sooner.
    poll_interval: float = 1.0
    #: Drain what is runnable now, then exit.
    burst: bool = False
    #: Seconds a draining worker lets runs finish before cancelling them (SIGTERM/SIGINT).
    grace_period: float = 30.0
    #: Seconds a cancelled run gets to unwind before its job is handed back regardless.
    cancel_wait: float = 5.0
    database: str | None = None
    #: On PostgreSQL, LISTEN for enqueues so an idle worker claims at once (polling remains).
    listen: bool = True
    worker_id: str = field(default_factory=default_worker_id)

    def __post_init__(self) -> None:
        if not self.queues or any(not q for q in self.queues):
            raise JobConfigurationError("--queue needs at least one non-empty queue name")
        if self.threads < 1:
            raise JobConfigurationError(f"--threads must be at least 1, not {self.threads}")
        if self.visibility_timeout <= 0 or self.heartbeat_interval <= 0:
            raise JobConfigurationError(
                "--visibility-timeout and --heartbeat-interval must be positive"
            )
        if self.heartbeat_interval * 2 > self.visibility_timeout:
            # One missed tick must not cost the lease: a heartbeat that fails is retried on
            # the next tick (rule 2), and that only helps if the timeout outlives it.
            raise JobConfigurationError(
                f"--heartbeat-interval ({self.heartbeat_interval:g}s) must be at most half of "
                f"--visibility-timeout ({self.visibility_timeout:g}s), so a failed heartbeat is "
                "retried before the lease lapses; a third or less is better"
            )
        if self.poll_interval <= 0:
            raise JobConfigurationError("--poll-interval must be positive")
        if self.grace_period < 0 or self.cancel_wait < 0:
            raise JobConfigurationError("--grace-period and --cancel-wait cannot be negative")
