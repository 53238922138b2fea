"""``manage.py runjobworker``: parse the flags, hand off to ``django_ultjobs.worker``."""

from __future__ import annotations

import gc
import sys
from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from django_ultjobs.conf import get_settings
from django_ultjobs.exceptions import DatabaseUnavailableError
from django_ultjobs.management.arguments import number, whole_number
from django_ultjobs.management.messages import one_line, unknown_alias
from django_ultjobs.observability.logs import (
    LOG_FORMATS,
    configure_console,
    project_configures_logging,
)
from django_ultjobs.worker.options import (
    MAX_ASYNC_CONCURRENCY,
    MAX_PROCESSES,
    MAX_THREADS,
    POOLS,
    WorkerOptions,
)
from django_ultjobs.worker.worker import WorkerProcess


def freeze_what_is_loaded() -> None:
    """Take everything loaded so far (Django, the apps, every jobs module, the worker) out of
    the cyclic collector's full collections, in a process that is the worker's own.

    It lives as long as the process, yet each full collection walked all of it with the GIL held,
    and so did the collections of the process's exit: a worker that abandoned a body on
    ``--exit-on-overrun`` took longer to exit than the visibility timeout that holds the job back
    (rule 56 (overrun-reported)). Collected first, so no garbage is frozen along; what the worker
    allocates from here on is collected as usual. Not applied from code (``call_command``, a
    test, the demo): the process is then someone else's.
    """
    gc.collect()
    gc.freeze()


class Command(BaseCommand):
    help = "Claim and run queued jobs until stopped (SIGTERM/SIGINT drains gracefully)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        conf = get_settings()
        parser.add_argument("--queue", "-q", action="append", dest="queues", metavar="NAME",
                            help="Queue to run (repeat for several; default: default).")
        parser.add_argument("--threads", "-t", type=whole_number, default=4,
                            help=f"Sync jobs run at once by this process, 1 to {MAX_THREADS} "
                                 "(default: 4).")
        parser.add_argument("--pool", choices=POOLS, default="threads",
                            help="Where sync jobs run: threads of this process (default), or "
                                 "child processes the worker can kill when a job does not "
                                 "stop (CPU-bound jobs, bodies that may never return).")
        parser.add_argument("--processes", type=whole_number, default=None, metavar="N",
                            help="With --pool process: child processes, one job at a time "
                                 f"each, 1 to {MAX_PROCESSES} (default: the number of CPUs).")
        parser.add_argument("--max-jobs-per-child", type=whole_number, default=None,
                            metavar="N",
                            help="With --pool process: replace a child after N jobs.")
        parser.add_argument("--max-memory-per-child", type=number, default=None, metavar="MB",
                            help="With --pool process: replace a child after a job that left "
                                 "it at MB MiB of resident memory or more.")
        parser.add_argument("--async-concurrency", type=whole_number, default=100, metavar="N",
                            help="async def jobs run at once on this process's event loop, "
                                 f"apart from --threads, 1 to {MAX_ASYNC_CONCURRENCY} "
                                 "(default: %(default)s).")
        parser.add_argument("--visibility-timeout", type=number,
                            default=conf.VISIBILITY_TIMEOUT,
                            help="Seconds a claimed job stays invisible without a heartbeat; "
                                 "also the fleet-slot TTL (default: %(default)s).")
        parser.add_argument("--heartbeat-interval", type=number,
                            default=conf.HEARTBEAT_INTERVAL,
                            help="Seconds between heartbeats; at most half the timeout "
                                 "(default: %(default)s).")
        parser.add_argument("--poll-interval", type=number, default=conf.POLL_INTERVAL,
                            help="Seconds between claims when idle (default: %(default)s).")
        parser.add_argument("--burst", action="store_true",
                            help="Run what is runnable now, then exit 0.")
        parser.add_argument("--grace-period", type=number, default=30.0,
                            help="Seconds to let runs finish on SIGTERM before cancelling "
                                 "them (default: %(default)s).")
        parser.add_argument("--cancel-wait", type=number, default=5.0,
                            help="Seconds cancelled runs get to unwind after the grace period "
                                 "before their jobs are handed back regardless "
                                 "(default: %(default)s).")
        parser.add_argument("--connect-timeout", type=number, default=60.0,
                            help="Seconds to wait at start for a database that is down or "
                                 "refusing connections, retrying with backoff; 0 fails at "
                                 "once (default: %(default)s).")
        parser.add_argument("--max-jobs", type=whole_number, default=None, metavar="N",
                            help="Start N runs, let them finish, then exit 0 (recycling: the "
                                 "supervisor starts a fresh process).")
        parser.add_argument("--max-memory", type=number, default=None, metavar="MB",
                            help="Once the process's resident memory reaches MB MiB, stop "
                                 "claiming, let the runs finish, then exit 0.")
        parser.add_argument("--exit-on-overrun", action="store_true",
                            help="When a job's body ignores its timeout for --cancel-wait "
                                 "seconds (Python cannot kill a thread), drain and exit with "
                                 "status 3, for a supervisor to start a fresh process.")
        parser.add_argument("--no-listen", action="store_true",
                            help="On PostgreSQL, do not LISTEN for enqueues; only poll.")
        parser.add_argument("--no-schedule", action="store_true",
                            help="Enqueue no ticks of periodic jobs; the other workers do "
                                 "(each tick is enqueued once whoever sends it).")
        parser.add_argument("--health-port", type=whole_number, default=None, metavar="PORT",
                            help="Serve GET /livez and /readyz on this port for a supervisor's "
                                 "probes (docs/worker.md); 0 picks a free port, logged.")
        parser.add_argument("--health-host", default="127.0.0.1", metavar="ADDRESS",
                            help="Address the health probes listen on (default: %(default)s; "
                                 "0.0.0.0 for a probe from outside the host or pod).")
        parser.add_argument("--database", default=None,
                            help="Database alias of the job tables (default: ULTJOBS DATABASE).")
        parser.add_argument("--worker-id", default=None,
                            help="Stable name of this worker (default: host:pid:random).")
        parser.add_argument("--log-format", choices=LOG_FORMATS, default=None,
                            help="Format of the console log the worker sets up when the "
                                 "project's LOGGING configures none for django_ultjobs: text "
                                 "(default) or json, one object per line. -v 2 adds a line per "
                                 "settled job.")

    #: Set when the command runs as its own process (from the command line), not from code.
    owns_the_process = False

    def run_from_argv(self, argv: list[str]) -> None:
        self.owns_the_process = True
        super().run_from_argv(argv)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self._run(options)
        except ImproperlyConfigured as exc:
            # A bad flag, a database the jobs cannot run on, an unmigrated database, a job that
            # promises what the store cannot keep: what is wrong and what to do is the whole
            # message, one line (rule 18 (start-mistake-named)).
            raise CommandError(one_line(exc)) from exc
        except DatabaseUnavailableError as exc:
            raise CommandError(str(exc)) from exc

    def _run(self, options: dict[str, Any]) -> None:
        database = options["database"]
        if database is not None and database not in connections.settings:
            raise CommandError(unknown_alias(database))
        extra: dict[str, Any] = {}
        if options["worker_id"] is not None:  # "" is refused by name, not taken as unset
            extra["worker_id"] = options["worker_id"]
        worker_options = WorkerOptions(
            queues=tuple(options["queues"] or ["default"]),
            threads=options["threads"],
            async_concurrency=options["async_concurrency"],
            visibility_timeout=options["visibility_timeout"],
            heartbeat_interval=options["heartbeat_interval"],
            poll_interval=options["poll_interval"],
            burst=options["burst"],
            grace_period=options["grace_period"],
            cancel_wait=options["cancel_wait"],
            connect_timeout=options["connect_timeout"],
            database=options["database"],
            listen=not options["no_listen"],
            max_jobs=options["max_jobs"],
            max_memory=options["max_memory"],
            exit_on_overrun=options["exit_on_overrun"],
            schedule=not options["no_schedule"],
            health_port=options["health_port"],
            health_host=options["health_host"],
            pool=options["pool"],
            processes=options["processes"],
            max_jobs_per_child=options["max_jobs_per_child"],
            max_memory_per_child=options["max_memory_per_child"],
            **extra,
        )
        worker = WorkerProcess(worker_options)
        if self.owns_the_process:
            # refused before anything process-wide changes (rule 10 (cap-kept-or-refused))
            worker.check()
            self._set_up_logging(options)
            freeze_what_is_loaded()
        code = worker.run()
        if code:
            # --exit-on-overrun fired (rule 56 (overrun-reported)): the jobs are drained, the status
            # tells the supervisor to replace this process. Said in one line, never a traceback.
            raise CommandError("stopped by --exit-on-overrun: a job's body ignored its timeout; "
                               "exiting for a fresh process", returncode=code)

    def _set_up_logging(self, options: dict[str, Any]) -> None:
        """Log to the console unless the project's LOGGING already covers our loggers."""
        if project_configures_logging():
            if options["log_format"] is not None:
                self.stderr.write("--log-format is ignored: the project's LOGGING configures "
                                  "the django_ultjobs loggers")
            return
        configure_console(verbosity=options["verbosity"],
                          log_format=options["log_format"] or "text", stream=sys.stderr)
