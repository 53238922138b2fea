"""``manage.py demo``: queue a few jobs, run a worker in this process until they finish, and show
what happened to each (status, attempts, result) in one short table: the receipts (a batch whose
callback sums them up), the ``charge_card`` job each receipt queues, a flaky export, a chain of
three archive steps, a slow report, and a cancellable slow report that is cancelled while it
runs (as the admin's Cancel action does).

It does not migrate: run ``manage.py migrate`` first. It exits non-zero if any of its jobs ended
otherwise than planned (all succeed but the cancelled report), so it doubles as a smoke test of
the whole path (enqueue in a transaction, claim, run, retry with backoff, durable steps, cancel,
settle, attempt records).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from argparse import ArgumentParser
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections, transaction
from django.utils import timezone

from django_ultjobs import Batch, chain
from django_ultjobs.conf import get_settings
from django_ultjobs.models import (
    FINISHED_STATUSES,
    AttemptRecord,
    Job,
    JobAttempt,
    JobStatus,
    JobStep,
)
from django_ultjobs.operations import cancel_jobs
from example_project.shop.jobs import (
    archive_step,
    charge_card,
    flaky_export,
    send_receipt,
    slow_report,
    stuck_render,
    summarize_receipts,
)
from example_project.shop.models import Order

CUSTOMERS = [("ada@example.com", 4200), ("grace@example.com", 1999), ("linus@example.com", 250)]
RESULT_WIDTH = 52
#: How long the cancellable report would run if nobody cancelled it.
CANCELLABLE_SECONDS = 600.0
#: The worker's heartbeat during the demo: a cancel is seen at the next one
#: (rule 3 (lost-lease-cancels)).
HEARTBEAT = 0.2


class Command(BaseCommand):
    help = ("Queue demo jobs (3 receipts in a batch with a callback, each queueing a "
            "charge_card, a flaky export, a chain of 3 steps, a slow report and a cancellable one "
            "that is cancelled while it runs), run a burst worker until they finish, and print "
            "what happened.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--threads", type=int, default=4,
                            help="Worker threads (default: %(default)s).")
        parser.add_argument("--timeout", type=float, default=30.0,
                            help="Give up after this many seconds (default: %(default)s).")
        parser.add_argument("--report-seconds", type=float, default=1.0,
                            help="How long slow_report runs (default: %(default)s).")

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity: int = options["verbosity"]
        alias = get_settings().DATABASE
        self._require_tables(alias)

        job_ids, cancellable = self._enqueue(options["report_seconds"])
        self.stdout.write(f"Queued {len(job_ids)} jobs on {self._describe(alias)}; running a "
                          f"burst worker ({options['threads']} threads)...")

        started = time.monotonic()
        canceller = threading.Thread(target=self._cancel_when_running,
                                     args=(cancellable, options["timeout"]), daemon=True)
        canceller.start()
        with _worker_logging(verbosity):
            passes = self._run_until_finished(job_ids, options["threads"], options["timeout"])
        canceller.join()
        elapsed = time.monotonic() - started

        # The charge_card jobs the receipts queued (each from a durable step) belong in the table.
        job_ids += self._charges(job_ids)
        jobs = list(Job.objects.filter(id__in=job_ids).order_by("id"))
        attempts: dict[int, list[AttemptRecord]] = {j: [] for j in job_ids}
        # Every attempt: a first one that succeeded plainly is held by its job's row
        # (rule 97 (attempt-on-row)).
        for attempt in AttemptRecord.objects.filter(job_id__in=job_ids).order_by("attempt", "id"):
            attempts[attempt.job_id].append(attempt)

        self.stdout.write(f"Done in {elapsed:.1f} s ({passes} worker "
                          f"pass{'es' if passes != 1 else ''}).")
        self.stdout.write("")
        self._print_table(jobs, attempts)
        self._print_attempt_errors(jobs, attempts)

        order_ids = [j.args[0] for j in jobs if j.name == send_receipt.name]
        # Each receipt queues its order's charge_card, which the same burst runs: paid is the
        # status after receipt_sent.
        sent = Order.objects.filter(
            id__in=order_ids, status__in=[Order.Status.RECEIPT_SENT, Order.Status.PAID]
        ).count()
        self.stdout.write(f"\nOrders with their receipt sent: {sent} of {len(order_ids)}.")

        expected = {j.id: JobStatus.CANCELLED if j.id == cancellable else JobStatus.SUCCEEDED
                    for j in jobs}
        bad = [j for j in jobs if j.status != expected[j.id]]
        charges = sum(1 for j in jobs if j.name == charge_card.name)
        if bad or sent != len(order_ids) or charges != len(order_ids):
            names = ", ".join(f"{j.name}#{j.id} ({j.status}, expected {expected[j.id]})"
                              for j in bad) or "orders not marked, or charges not queued"
            raise CommandError(f"demo failed: {names}")
        self.stdout.write(self.style.SUCCESS(
            f"All {len(jobs) - 1} demo jobs succeeded, and the cancellable report "
            f"{slow_report.name}#{cancellable} was cancelled while it ran."))
        with _worker_logging(verbosity):
            self._process_pool_part()

    def _process_pool_part(self) -> None:
        """A body that never checks its 1 s timeout, run by a burst worker with ``--pool
        process``: its child is killed ``--cancel-wait`` after the timeout, the attempt says
        ``timed_out``, and the worker exits."""
        stuck = stuck_render.enqueue()
        started = time.monotonic()
        call_command("runjobworker", burst=True, pool="process", processes=1, cancel_wait=0.2,
                     poll_interval=0.1, heartbeat_interval=HEARTBEAT, visibility_timeout=10.0,
                     grace_period=5.0)
        elapsed = time.monotonic() - started
        outcomes = list(AttemptRecord.objects.filter(job_id=stuck.id)
                        .values_list("outcome", flat=True))
        if outcomes != ["timed_out"]:
            raise CommandError(f"demo failed: {stuck_render.name}#{stuck.id} ended {outcomes}")
        self.stdout.write(self.style.SUCCESS(
            f"Process pool: {stuck_render.name}#{stuck.id}, a busy loop that never checks its "
            f"1 s timeout, was ended by killing its child process ({elapsed:.1f} s, attempt "
            "timed_out)."))

    # -- steps ----------------------------------------------------------------------------------

    def _require_tables(self, alias: str) -> None:
        tables = set(connections[alias].introspection.table_names())
        missing = {Job._meta.db_table, JobAttempt._meta.db_table, Order._meta.db_table} - tables
        if missing:
            raise CommandError(
                f"the database has no {', '.join(sorted(missing))} table(s) yet: "
                "run `python manage.py migrate` first"
            )

    def _enqueue(self, report_seconds: float) -> tuple[list[int], int]:
        """Create the orders and queue their jobs, all in one transaction (as a view would).

        Return the ids queued, and the id of the report that will be cancelled.
        """
        with transaction.atomic():
            orders = [Order.objects.create(email=email, total_cents=cents)
                      for email, cents in CUSTOMERS]
            # Every job enqueued in the block is a member; the callback runs once they all
            # succeeded, released in the settle of the last one (docs/workflows.md).
            with Batch(on_success=summarize_receipts.call(), description="receipts") as batch:
                receipts = [
                    send_receipt.enqueue(orders[0].id),
                    # A one-off option: this receipt jumps the queue; the registered job is
                    # unchanged.
                    send_receipt.using(priority=10).enqueue(orders[1].id),
                    send_receipt.enqueue(orders[2].id),
                ]
            # Each step runs once the one before it succeeded.
            archive = chain(*(archive_step.call(step)
                              for step in ("export", "compress", "upload"))).enqueue()
            queued = [
                *receipts,
                *Job.objects.filter(id__in=[*batch.callback_ids.values(), *archive.job_ids]),
                flaky_export.enqueue(orders[0].id),
                slow_report.enqueue(report_seconds),
                # Would run for ten minutes: cancelled while it runs (_cancel_when_running).
                slow_report.enqueue(CANCELLABLE_SECONDS),
            ]
        return [j.id for j in queued], queued[-1].id

    def _cancel_when_running(self, job_id: int, timeout: float) -> None:
        """Cancel the cancellable report once a worker runs it, as the admin's action does."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if Job.objects.filter(id=job_id, status=JobStatus.RUNNING).exists():
                    # A running job is asked to stop; its worker cancels the run at its next
                    # heartbeat, and the body's ctx.raise_if_cancelled() ends it.
                    cancel_jobs([job_id])
                    self.stdout.write(f"Cancelling {slow_report.name}#{job_id} while it runs "
                                      "(the admin's Cancel action does the same)...")
                    return
                if Job.objects.filter(id=job_id, status__in=FINISHED_STATUSES).exists():
                    return
                time.sleep(0.05)
        finally:
            connections.close_all()

    @staticmethod
    def _charges(job_ids: list[int]) -> list[int]:
        """The charge_card jobs the receipts queued: what their ``queue_charge`` steps recorded."""
        steps = JobStep.objects.filter(job_id__in=job_ids, name="queue_charge")
        return sorted(int(step.result) for step in steps if step.result is not None)

    def _run_until_finished(self, job_ids: list[int], threads: int, timeout: float) -> int:
        """Run burst workers until every demo job is finished; return how many passes it took.

        A burst worker exits when nothing is runnable *now*; a job waiting out its retry backoff
        becomes runnable a moment later, so sleep until then and run another pass.
        """
        deadline = time.monotonic() + timeout
        passes = 0
        while True:
            passes += 1
            call_command("runjobworker", burst=True, threads=threads, poll_interval=0.1,
                         grace_period=5.0, heartbeat_interval=HEARTBEAT,
                         visibility_timeout=10.0)
            ids = job_ids + self._charges(job_ids)
            live = Job.objects.filter(id__in=ids).exclude(status__in=FINISHED_STATUSES)
            if not live.exists():
                return passes
            if time.monotonic() >= deadline:
                self.stderr.write(f"Gave up after {timeout:g} s with jobs still unfinished.")
                return passes
            next_visible = min(live.values_list("visible_at", flat=True))
            wait = (next_visible - timezone.now()).total_seconds()
            time.sleep(min(max(wait, 0.05), 1.0, max(deadline - time.monotonic(), 0.0)))

    # -- output ---------------------------------------------------------------------------------

    def _print_table(self, jobs: list[Job], attempts: dict[int, list[AttemptRecord]]) -> None:
        rows = [("id", "job", "prio", "status", "tries", "attempt outcomes", "result / last error")]
        for j in jobs:
            outcomes = " > ".join(a.outcome for a in attempts[j.id]) or "-"
            if j.status == JobStatus.SUCCEEDED:
                detail = json.dumps(j.result, separators=(", ", ": "))
            else:
                detail = _last_line(j.last_error) or "-"
            rows.append((str(j.id), j.name, str(j.priority), j.status,
                         f"{j.attempt}/{j.max_attempts}", outcomes, _clip(detail, RESULT_WIDTH)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for n, row in enumerate(rows):
            line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            if n == 0:
                self.stdout.write(self.style.MIGRATE_HEADING(line))
                continue
            status = row[3]
            style = (self.style.SUCCESS if status == JobStatus.SUCCEEDED
                     else self.style.WARNING if status == JobStatus.CANCELLED
                     else self.style.ERROR)
            self.stdout.write(line.replace(status, style(status), 1))

    def _print_attempt_errors(self, jobs: list[Job], attempts: dict[int, list[AttemptRecord]]
                              ) -> None:
        lines = [
            f"  {j.name}#{j.id} attempt {a.attempt} ({a.outcome}): {_last_line(a.error)}"
            for j in jobs
            for a in attempts[j.id]
            if a.error.strip()
        ]
        if lines:
            self.stdout.write("\nAttempt errors (kept in JobAttempt, tracebacks in full):")
            for line in lines:
                self.stdout.write(_clip(line, 110))

    @staticmethod
    def _describe(alias: str) -> str:
        conn = connections[alias]
        name = conn.settings_dict["NAME"]
        return f"{conn.vendor} ({name})" if conn.vendor == "sqlite" else f"{conn.vendor} {name!r}"


@contextmanager
def _worker_logging(verbosity: int) -> Iterator[None]:
    """Quiet the worker's routine log lines unless ``-v 2``: the table says what happened.

    Errors still show (a job that fails for good, a database that cannot be reached).
    """
    logger = logging.getLogger("django_ultjobs")
    previous = logger.level
    logger.setLevel(logging.DEBUG if verbosity >= 3 else logging.INFO if verbosity >= 2
                    else logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1].strip() if lines else ""


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
