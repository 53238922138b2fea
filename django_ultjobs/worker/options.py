"""The worker's options, validated when built so a bad flag fails before anything starts."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

from ..core.numeric import is_finite, shown
from ..exceptions import JobConfigurationError
from ..jobs.options import MAX_QUEUE, name_problem

#: The longest any of the worker's durations may be: one day. Past it a value is a typo, and far
#: enough past it (1e12 s) a sleep or a lease's timedelta overflows after the worker started.
MAX_SECONDS = 86_400.0
#: The most executor threads one process may run. Each thread costs a stack (8 MB reserved) and,
#: once its body touches the ORM, a database connection; far past this count a process hits the
#: system's thread limit after starting hundreds of them. Run more processes instead.
MAX_THREADS = 1024
#: The most ``async def`` bodies one process may run at once (``--async-concurrency``). A run in
#: flight costs its task, its lease in every heartbeat statement and its settle, no thread; past
#: this many one process's heartbeat and completer are the limit: run more processes instead.
MAX_ASYNC_CONCURRENCY = 10_000
#: The most child processes one worker may run with ``--pool process``: each is a Python
#: process with its own memory and database connection.
MAX_PROCESSES = 256
#: The pools a worker can run sync bodies in (``--pool``).
POOLS = ("threads", "process")

#: The longest ``--worker-id``: the length of the columns it is stored in (the worker's row, each
#: job it claims, each attempt it records).
MAX_WORKER_ID = 200


def default_worker_id() -> str:
    """``<host>:<pid>:<random>``: unique across restarts, readable in the admin and the logs."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class WorkerOptions:
    """How one ``runjobworker`` process claims and runs jobs."""

    queues: tuple[str, ...] = ("default",)
    threads: int = 4
    #: ``async def`` bodies run at once on the process's event loop (rule 85 (one-event-loop)); sync
    #: bodies are bounded by ``threads`` apart from these.
    async_concurrency: int = 100
    #: Seconds a claimed job stays invisible without a heartbeat (rule 1 (leased-claim)); also the
    #: fleet slot TTL, so a dead worker frees its slot on the schedule its job is re-delivered
    #: (rule 5 (fleet-cap)).
    visibility_timeout: float = 30.0
    #: Seconds between heartbeats; the timeout must leave several beats
    #: (rule 2 (heartbeat-retried)).
    heartbeat_interval: float = 10.0
    #: Seconds an idle worker waits between claims when nothing wakes it sooner.
    poll_interval: float = 1.0
    #: Drain what is runnable now, then exit.
    burst: bool = False
    #: Seconds a draining worker lets runs finish before cancelling them (SIGTERM/SIGINT).
    grace_period: float = 30.0
    #: Seconds a cancelled run gets to unwind before its job is handed back regardless.
    cancel_wait: float = 5.0
    #: Seconds a starting worker waits for its database (down, restarting, refusing
    #: connections) before it gives up; 0 fails at the first error.
    connect_timeout: float = 60.0
    database: str | None = None
    #: On PostgreSQL, LISTEN for enqueues so an idle worker claims at once (polling remains).
    listen: bool = True
    #: Drain and exit ``EXIT_OVERRUN`` once a body ignores its timeout for ``cancel_wait``
    #: seconds (rule 56 (overrun-reported)): a supervisor then replaces the process, the only way to
    #: stop it.
    exit_on_overrun: bool = False
    #: Enqueue the ticks of the periodic jobs this process knows (rule 60 (tick-once));
    #: ``--no-schedule`` leaves it to the other workers. A ``burst`` worker never does.
    schedule: bool = True
    worker_id: str = field(default_factory=default_worker_id)
    #: Runs to start before stopping to claim and exiting 0 once they finish
    #: (rule 76 (recycle-at-bound)).
    max_jobs: int | None = None
    #: MiB of resident memory past which the worker stops claiming and exits 0 likewise.
    max_memory: float | None = None
    #: The port of the health probes (rules 121 (probe-alive) to 123 (probes-only)), None for
    #: none; 0 lets the system pick a free one (logged when it listens).
    health_port: int | None = None
    #: The address the health server listens on.
    health_host: str = "127.0.0.1"
    #: Where sync bodies run: ``threads`` (executor threads in this process) or ``process``
    #: (child processes, one body each, that the worker can kill: ``process_pool.py``).
    pool: str = "threads"
    #: Child processes with ``pool="process"``; None: as many as the host has CPUs.
    processes: int | None = None
    #: Runs a child does before a fresh one replaces it (``pool="process"``); None: no bound.
    max_jobs_per_child: int | None = None
    #: MiB of resident memory past which a child is replaced after its run.
    max_memory_per_child: float | None = None

    @property
    def places(self) -> int:
        """Sync bodies this worker runs at once: its threads, or its child processes."""
        if self.pool == "process":
            return self.processes or os.cpu_count() or 1
        return self.threads

    def __post_init__(self) -> None:
        self._check_seconds()
        if not self.queues or any(not q for q in self.queues):
            raise JobConfigurationError("--queue needs at least one non-empty queue name")
        for queue in self.queues:
            _check_flag_text("--queue", queue, MAX_QUEUE)
        self._check_health()
        _check_flag_text("--worker-id", self.worker_id, MAX_WORKER_ID)
        if not 1 <= self.threads <= MAX_THREADS:
            more = "; for more jobs at once, run more worker processes" if self.threads > 1 else ""
            raise JobConfigurationError(
                f"--threads must be from 1 to {MAX_THREADS}, not {self.threads}{more}")
        concurrency = self.async_concurrency
        if (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                or not 1 <= concurrency <= MAX_ASYNC_CONCURRENCY):
            raise JobConfigurationError(
                f"--async-concurrency must be a whole number from 1 to "
                f"{MAX_ASYNC_CONCURRENCY}, not {concurrency!r}")
        if self.visibility_timeout <= 0 or self.heartbeat_interval <= 0:
            raise JobConfigurationError(
                "--visibility-timeout and --heartbeat-interval must be positive"
            )
        if self.heartbeat_interval * 2 > self.visibility_timeout:
            # One missed beat must not cost the lease: a heartbeat that fails is retried on
            # the next beat (rule 2 (heartbeat-retried)), and that only helps if the timeout
            # outlives it.
            raise JobConfigurationError(
                f"--heartbeat-interval ({self.heartbeat_interval:g}s) must be at most half of "
                f"--visibility-timeout ({self.visibility_timeout:g}s), so a failed heartbeat is "
                "retried before the lease lapses; a third or less is better (a flag not given "
                "takes ULTJOBS['HEARTBEAT_INTERVAL'] or ULTJOBS['VISIBILITY_TIMEOUT'])"
            )
        if self.poll_interval <= 0:
            raise JobConfigurationError("--poll-interval must be positive")
        self._check_recycling()
        self._check_pool()

    def _check_pool(self) -> None:
        """Refuse an unknown pool, a process count out of range, and per-child bounds a thread
        pool could never apply (rule 18 (start-mistake-named))."""
        if self.pool not in POOLS:
            raise JobConfigurationError(
                f"--pool must be one of {', '.join(POOLS)}, not {self.pool!r}")
        if self.pool == "process" and not hasattr(os, "pidfd_open"):
            raise JobConfigurationError(
                "--pool process needs Linux 5.3 or later (it ends children through pidfds); "
                "use --pool threads here")
        count = self.processes
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                                  or not 1 <= count <= MAX_PROCESSES):
            raise JobConfigurationError(
                f"--processes must be a whole number from 1 to {MAX_PROCESSES}, not {count!r}")
        jobs, memory = self.max_jobs_per_child, self.max_memory_per_child
        if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int)
                                 or jobs < 1):
            raise JobConfigurationError(
                f"--max-jobs-per-child must be a whole number of runs from 1, not {jobs!r}")
        if memory is not None and (isinstance(memory, bool)
                                   or not isinstance(memory, int | float)
                                   or not is_finite(memory) or memory <= 0):
            raise JobConfigurationError(
                f"--max-memory-per-child must be a number of MiB more than 0, not "
                f"{shown(memory)}")
        if self.pool != "process" and (count is not None or jobs is not None
                                       or memory is not None):
            raise JobConfigurationError(
                "--processes, --max-jobs-per-child and --max-memory-per-child need "
                "--pool process")

    def _check_recycling(self) -> None:
        """Refuse a ``--max-jobs`` or ``--max-memory`` that could never be reached, or is
        reached before the first run (rule 76 (recycle-at-bound))."""
        jobs = self.max_jobs
        if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int)
                                 or jobs < 1):
            raise JobConfigurationError(
                f"--max-jobs must be a whole number of runs from 1, not {jobs!r}")
        memory = self.max_memory
        if memory is not None and (isinstance(memory, bool)
                                   or not isinstance(memory, int | float)
                                   or not is_finite(memory) or memory <= 0):
            raise JobConfigurationError(
                f"--max-memory must be a number of MiB more than 0, not {shown(memory)}")

    def _check_health(self) -> None:
        """Refuse a health port that is not one (a port past 65535 fails the bind with a
        message about something else) and an empty host, by their flags
        (rule 18 (start-mistake-named))."""
        port = self.health_port
        if port is not None and (isinstance(port, bool) or not isinstance(port, int)
                                 or not 0 <= port <= 65535):
            raise JobConfigurationError(
                f"--health-port must be a port number from 1 to 65535 (or 0: one the system "
                f"picks), not {port!r}")
        if not isinstance(self.health_host, str) or not self.health_host.strip():
            raise JobConfigurationError(
                f"--health-host must be an address to listen on, such as 127.0.0.1 or 0.0.0.0, "
                f"not {self.health_host!r}")

    def _check_seconds(self) -> None:
        """Refuse a duration that is not a number, is infinite, or is past ``MAX_SECONDS``.

        ``nan`` passes every comparison the checks below make (each is False), so it would be
        accepted and then fail every claim; ``inf`` overflows the first sleep.
        """
        positive = ("visibility_timeout", "heartbeat_interval", "poll_interval")
        for name in (*positive, "grace_period", "cancel_wait", "connect_timeout"):
            value = getattr(self, name)
            low = "more than 0" if name in positive else "0"
            # is_finite, not math.isfinite: that raises OverflowError for an int past a float's
            # range, which the bound refuses by the flag's name instead.
            if not (isinstance(value, int | float) and is_finite(value)
                    and 0 <= value <= MAX_SECONDS) or (name in positive and value == 0):
                raise JobConfigurationError(
                    f"--{name.replace('_', '-')} must be a number of seconds from {low} to "
                    f"{MAX_SECONDS:g} (one day), not {shown(value)}"
                )


def _check_flag_text(flag: str, value: object, longest: int) -> None:
    """Refuse, by its flag, text the database cannot store or would cut, with the rule a job's
    queue is checked by: before the worker connects, a value its column refuses failed every
    try of the start until ``--connect-timeout`` and was then blamed on the database
    (rule 18 (start-mistake-named))."""
    problem = name_problem(value, longest)
    if problem is not None:
        too_long = isinstance(value, str) and len(value) > longest
        raise JobConfigurationError(
            f"{flag} {problem}, not {f'{len(value):,} characters' if too_long else repr(value)}")
