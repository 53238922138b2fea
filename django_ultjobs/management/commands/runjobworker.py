"""``manage.py runjobworker``: parse the flags, hand off to ``django_ultjobs.worker``."""

from __future__ import annotations

import gc
import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_ultjobs.conf import get_settings
from django_ultjobs.exceptions import DatabaseUnavailableError, JobConfigurationError
from django_ultjobs.worker import Worker, WorkerOptions


def tune_the_process() -> None:
    """Process-wide settings for a process that is the worker's own (``manage.py runjobworker``).

    Not applied when the command is called from code (``call_command``, a test, the demo): the
    process is then someone else's, and both would outlive the call.
    """
    # Hand the GIL over every 1 ms instead of 5 ms, so a thread woken by a notification or a
    # finished run is not kept waiting behind another thread's bytecode (idle pickup p50 6.2 ms
    # -> 3.2 ms on this machine's PostgreSQL).
    sys.setswitchinterval(0.001)
    # Take everything loaded so far (Django, the apps, every jobs module, the worker) out of the
    # cyclic collector's full collections: it lives as long as the process, yet each full
    # collection walked all of it with the GIL held, seven of about 36 ms in a 50,000-job no-op
    # drain (0.25 s), every thread stalled meanwhile; 0.05 s once frozen. Collected first, so no
    # garbage is frozen along; what the worker allocates from here on is collected as usual.
    gc.collect()
    gc.freeze()


class Command(BaseCommand):
    help = "Claim and run queued jobs until stopped (SIGTERM/SIGINT drains gracefully)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        conf = get_settings()
        parser.add_argument("--queue", "-q", action="append", dest="queues", metavar="NAME",
                            help="Queue to run (repeat for several; default: default).")
        parser.add_argument("--threads", "-t", type=int, default=4,
                            help="Jobs run at once by this process (default: 4).")
        parser.add_argument("--visibility-timeout", type=float,
                            default=conf.VISIBILITY_TIMEOUT,
                            help="Seconds a claimed job stays invisible without a heartbeat; "
                                 "also the fleet-slot TTL (default: %(default)s).")
        parser.add_argument("--heartbeat-interval", type=float,
                            default=conf.HEARTBEAT_INTERVAL,
                            help="Seconds between heartbeats; at most half the timeout "
                                 "(default: %(default)s).")
        parser.add_argument("--poll-interval", type=float, default=conf.POLL_INTERVAL,
                            help="Seconds between claims when idle (default: %(default)s).")
        parser.add_argument("--burst", action="store_true",
                            help="Run what is runnable now, then exit 0.")
        parser.add_argument("--grace-period", type=float, default=30.0,
                            help="Seconds to let runs finish on SIGTERM before cancelling "
                                 "them (default: %(default)s).")
        parser.add_argument("--connect-timeout", type=float, default=60.0,
                            help="Seconds to wait at start for a database that is down or "
                                 "refusing connections, retrying with backoff; 0 fails at "
                                 "once (default: %(default)s).")
        parser.add_argument("--no-listen", action="store_true",
                            help="On PostgreSQL, do not LISTEN for enqueues; only poll.")
        parser.add_argument("--database", default=None,
                            help="Database alias of the job tables (default: ULTJOBS DATABASE).")
        parser.add_argument("--worker-id", default=None,
                            help="Stable name of this worker (default: host:pid:random).")

    #: Set when the command runs as its own process (from the command line), not from code.
    owns_the_process = False

    def run_from_argv(self, argv: list[str]) -> None:
        self.owns_the_process = True
        super().run_from_argv(argv)

    def handle(self, *args: Any, **options: Any) -> None:
        extra: dict[str, Any] = {}
        if options["worker_id"]:
            extra["worker_id"] = options["worker_id"]
        try:
            worker_options = WorkerOptions(
                queues=tuple(options["queues"] or ["default"]),
                threads=options["threads"],
                visibility_timeout=options["visibility_timeout"],
                heartbeat_interval=options["heartbeat_interval"],
                poll_interval=options["poll_interval"],
                burst=options["burst"],
                grace_period=options["grace_period"],
                connect_timeout=options["connect_timeout"],
                database=options["database"],
                listen=not options["no_listen"],
                **extra,
            )
            worker = Worker(worker_options)
            if self.owns_the_process:
                worker.check()  # refused before anything process-wide changes (rule 10)
                tune_the_process()
            worker.run()
        except (JobConfigurationError, DatabaseUnavailableError) as exc:
            # One line, no traceback: what is wrong and what to do is the whole message.
            raise CommandError(str(exc)) from exc
