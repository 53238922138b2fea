"""``manage.py ultjobs <subcommand>``: operate the jobs from a terminal when the admin is down.

``list``, ``show``, ``cancel``, ``retry``, ``pause``, ``resume``, ``stats``. The actions are the
admin's own operations (``django_ultjobs.operations``): the same statuses change, the same ones
are left alone and said so, and each is logged with who did it (``by=cli:<user>``).
"""

from __future__ import annotations

import getpass
from argparse import ArgumentParser
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, InterfaceError, connections

from django_ultjobs.conf import get_settings
from django_ultjobs.exceptions import JobOptionError, OperationInputError
from django_ultjobs.jobs.unique import KeyHeld
from django_ultjobs.management.arguments import job_id, whole_number
from django_ultjobs.management.messages import one_line, unknown_alias, unmigrated
from django_ultjobs.management.progress import Progress
from django_ultjobs.management.reports import (
    as_dict,
    job_detail,
    job_rows,
    queue_stats,
    worker_stats,
)
from django_ultjobs.management.selection import (
    BATCH,
    CANCEL_BATCH,
    CANCEL_WORKFLOW,
    JOB,
    OLDER_THAN,
    QUEUE,
    TAG,
    WORKFLOW,
    Filter,
    add_filters,
    given,
    select,
    since_filter,
    status_filter,
)
from django_ultjobs.management.summary import cancel_summary, missing_error, retry_summary
from django_ultjobs.management.tables import as_json, table
from django_ultjobs.models import JobStatus
from django_ultjobs.operations import (
    CANCEL_NOW,
    CHUNK,
    MAX_CHUNK,
    RETRYABLE,
    cancel_jobs,
    check_job_ids,
    pause_queue,
    paused_queues,
    resume_queue,
    retry_jobs,
)
from django_ultjobs.store import get_store

#: The most rows ``list`` prints; past it, narrow the filters.
MAX_LIMIT = 10_000
#: The filters of each subcommand; a new filter is one more entry (selection.Filter).
LIST_FILTERS: tuple[Filter, ...] = (
    status_filter(JobStatus.values, "the"), QUEUE, JOB,
    since_filter("created_at", "enqueued"), OLDER_THAN, TAG, BATCH, WORKFLOW)
CANCEL_FILTERS: tuple[Filter, ...] = (
    status_filter([*CANCEL_NOW, JobStatus.RUNNING], "the live"), QUEUE, JOB, OLDER_THAN, TAG,
    CANCEL_BATCH, CANCEL_WORKFLOW)
RETRY_FILTERS: tuple[Filter, ...] = (
    status_filter(RETRYABLE, "the finished"), QUEUE, JOB,
    since_filter("finished_at", "that finished"), OLDER_THAN, TAG, BATCH, WORKFLOW)


def _actor() -> str:
    """``cli:<login>``: who acted, for the log line of each action."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no login name (a container with no passwd entry)
        return "cli"


def _at_least(count: int, lower_bound: bool) -> str | int:
    """A figure as the table shows it: a count read from a full window as "more than" the cap,
    as the admin shows it."""
    return f">{count - 1:,}" if lower_bound else count


def _follow(bar: Progress) -> Callable[[int, int], None]:
    """An operation's ``progress`` callback (ids gone through, of how many) moving ``bar``: a
    live bar on stderr when it is a terminal, nothing otherwise (the result line then says how
    long it took)."""

    def advance(done: int, total: int) -> None:
        if bar.done == 0:  # the first chunk: the total is known from here on
            bar.set_total(total)
        bar.advance(done - bar.done)

    return advance


class Command(BaseCommand):
    help = ("Operate the jobs from a terminal: list, show, cancel, retry, pause, resume, stats. "
            "The same operations as the admin's, each logged.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        assert isinstance(parser, CommandParser)
        sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
        self._add_list(sub.add_parser("list", help="List jobs, newest first."))
        show = sub.add_parser("show", help="Show one job: its row, attempts, steps and error.")
        show.add_argument("id", type=job_id, help="The job's id.")
        show.add_argument("--json", action="store_true", help="Print JSON instead of text.")
        cancel = sub.add_parser("cancel", help="Cancel queued or waiting jobs now; ask running "
                                               "ones to stop (within a second on PostgreSQL, "
                                               "at their worker's next heartbeat on SQLite).")
        self._add_bulk(cancel, CANCEL_FILTERS)
        cancel.add_argument("--reason", default="",
                            help="Why: logged, and kept as the error of the jobs cancelled now.")
        self._add_retry(sub.add_parser(
            "retry", help="Queue failed or cancelled jobs again, runnable now, one more attempt."))
        pause = sub.add_parser("pause", help="Pause a queue fleet-wide: no worker claims from "
                                             "it; runs in flight finish; enqueue still works.")
        pause.add_argument("queue", help="The queue's name.")
        pause.add_argument("--reason", default="", help="Why: shown in the admin and logged.")
        resume = sub.add_parser("resume", help="Resume a paused queue.")
        resume.add_argument("queue", help="The queue's name.")
        stats = sub.add_parser("stats", help="Per queue and per worker figures.")
        stats.add_argument("--json", action="store_true", help="Print JSON instead of text.")
        for each in sub.choices.values():
            each.add_argument("--database", default=None,
                              help="Database alias of the job tables (default: ULTJOBS "
                                   "DATABASE).")

    @staticmethod
    def _add_list(parser: ArgumentParser) -> None:
        add_filters(parser, LIST_FILTERS)
        parser.add_argument("--limit", type=whole_number, default=50,
                            help=f"Rows to print, 1 to {MAX_LIMIT:,} (default: %(default)s).")
        parser.add_argument("--json", action="store_true", help="Print JSON instead of text.")

    @staticmethod
    def _add_bulk(parser: ArgumentParser, filters: tuple[Filter, ...]) -> None:
        """The ids, filters and flags ``cancel`` and ``retry`` share."""
        parser.add_argument("ids", type=job_id, nargs="*", metavar="ID",
                            help="Job ids (or filters instead, or --all).")
        add_filters(parser, filters)
        parser.add_argument("--all", action="store_true",
                            help="Every job the action can change, with no ids and no filter.")
        parser.add_argument("--dry-run", action="store_true",
                            help="Count what would change; change nothing.")
        parser.add_argument("--chunk-size", type=whole_number, default=CHUNK,
                            help=f"Jobs per transaction, 1 to {MAX_CHUNK:,} "
                                 "(default: %(default)s).")

    @classmethod
    def _add_retry(cls, parser: ArgumentParser) -> None:
        cls._add_bulk(parser, RETRY_FILTERS)
        parser.add_argument("--failed", action="store_true",
                            help="Only failed jobs: the same as --status failed.")
        parser.add_argument("--keyless", action="store_true",
                            help="Retry a job whose unique key another job holds now anyway, "
                                 "without its key, beside that job (two runs of one key may "
                                 "then run at once). Without it such a job is not retried.")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["database"]
        if alias is not None and alias not in connections.settings:
            raise CommandError(unknown_alias(alias))
        alias = alias or get_settings().DATABASE
        action = getattr(self, f"_{options['subcommand']}")
        try:
            action(alias, options)
        except (OperationInputError, JobOptionError) as exc:
            raise CommandError(str(exc)) from exc
        except (DatabaseError, InterfaceError) as exc:
            if get_store(alias).schema_missing(exc):
                raise CommandError(unmigrated(alias)) from exc
            raise CommandError(f"database {alias!r}: {one_line(exc)}") from exc
        except ImproperlyConfigured as exc:  # a DATABASES entry whose ENGINE does not import
            raise CommandError(one_line(exc)) from exc

    # -- reading --------------------------------------------------------------------------------

    def _list(self, alias: str, options: dict[str, Any]) -> None:
        limit = options["limit"]
        if not 1 <= limit <= MAX_LIMIT:
            raise CommandError(f"--limit must be from 1 to {MAX_LIMIT}, not {limit}")
        rows = job_rows(select(alias, options, LIST_FILTERS), limit)
        if options["json"]:
            self.stdout.write(as_json(rows))
            return
        if not rows:
            self.stdout.write("no jobs match")
            return
        self.stdout.write(table(
            ["id", "name", "queue", "status", "attempt", "enqueued", "finished", "error"],
            [[r["id"], r["name"], r["queue"], r["status"], f"{r['attempt']}/{r['max_attempts']}",
              r["created_at"], r["finished_at"], r["exception"] or None] for r in rows]))

    def _show(self, alias: str, options: dict[str, Any]) -> None:
        job_id = check_job_ids([options["id"]])[0]
        job = job_detail(alias, job_id)
        if job is None:
            raise CommandError(f"no job has id {job_id} in database {alias!r}")
        if options["json"]:
            self.stdout.write(as_json(job))
            return
        attempts, steps, error = job.pop("attempts"), job.pop("steps"), job.pop("last_error")
        exception = job.pop("exception")
        dependencies, dependents = job.pop("dependencies"), job.pop("dependents")
        self.stdout.write(table(["field", "value"], [[k, v] for k, v in job.items()]))
        if attempts:
            self.stdout.write("\nattempts:\n" + table(
                ["attempt", "outcome", "worker", "started", "finished", "error"],
                [[a["attempt"], a["outcome"], a["worker_id"], a["started_at"], a["finished_at"],
                  a["exception"] or None] for a in attempts]))
        if steps:
            self.stdout.write("\nsteps:\n" + table(
                ["step", "status", "attempt", "completed"],
                [[s["name"], s["status"], s["attempt"], s["completed_at"]] for s in steps]))
        self._linked("dependencies", dependencies)
        self._linked("dependents", dependents)
        if error:
            self.stdout.write(f"\nlast error: {exception}")
            if error.strip() != exception:
                self.stdout.write(f"\n{error}")

    def _linked(self, title: str, linked: dict[str, Any]) -> None:
        """A table of the dependencies (or dependents) ``show`` read, and how many it left."""
        jobs, total = linked["jobs"], linked["total"]
        if not jobs:
            return
        more = f" (the first {len(jobs)} of {total:,})" if total > len(jobs) else ""
        self.stdout.write(f"\n{title}{more}:\n" + table(
            ["id", "name", "status"], [[j["id"], j["name"], j["status"]] for j in jobs]))

    def _stats(self, alias: str, options: dict[str, Any]) -> None:
        queues, workers = queue_stats(alias), worker_stats(alias)
        if options["json"]:
            self.stdout.write(as_json({"queues": [as_dict(q) for q in queues],
                                       "workers": [as_dict(w) for w in workers]}))
            return
        figures = ("runnable", "delayed", "running", "waiting", "pending", "failed_last_hour")
        self.stdout.write(table(
            ["queue", "paused", "runnable", "delayed", "running", "waiting", "pending",
             "failed 1h", "oldest s"],
            [[q.queue, q.paused, *(_at_least(getattr(q, f), f in q.more_than) for f in figures),
              q.oldest_runnable_age] for q in queues])
            if queues else "no queued, running, waiting or pending jobs, and no paused queue")
        self.stdout.write("")
        self.stdout.write(table(
            ["worker", "state", "runs", "heartbeat s ago", "queues"],
            [[w.worker_id, w.state, w.runs, w.last_heartbeat_age, ",".join(w.queues)]
             for w in workers]) if workers else "no worker seen in the last day")

    # -- acting ---------------------------------------------------------------------------------

    def _cancel(self, alias: str, options: dict[str, Any]) -> None:
        selection = self._selection(alias, options, CANCEL_FILTERS, "cancel")
        with Progress("cancel", unit="job", stream=self.stderr) as bar:
            result = cancel_jobs(selection, using=alias, progress=_follow(bar), by=_actor(),
                                 reason=options["reason"], chunk_size=options["chunk_size"],
                                 dry_run=options["dry_run"])
        out, notes = cancel_summary(result, dry_run=options["dry_run"], took=bar.summary())
        self._report(out, notes, result.missing_ids)

    def _retry(self, alias: str, options: dict[str, Any]) -> None:
        if options["failed"]:
            if options["ids"]:
                raise CommandError("retry takes job ids or filters, not both: drop the ids or "
                                   "--failed")
            if options["status"]:
                raise CommandError("--failed is --status failed: give one of them")
            options = {**options, "status": ["failed"]}
        selection = self._selection(alias, options, RETRY_FILTERS, "retry")
        with Progress("retry", unit="job", stream=self.stderr) as bar:
            result = retry_jobs(selection, using=alias, progress=_follow(bar), by=_actor(),
                                keyless=options["keyless"], chunk_size=options["chunk_size"],
                                dry_run=options["dry_run"])
        out, notes = retry_summary(result, dry_run=options["dry_run"], took=bar.summary())
        self._report(out, notes, result.missing_ids, result.refused)

    @staticmethod
    def _selection(alias: str, options: dict[str, Any], filters: tuple[Filter, ...],
                   action: str) -> Any:
        """The job ids given, or the jobs the filters (or ``--all``) select; refused in one
        line before any SQL when the ids and filters are both given, or none is."""
        chunk_size = options["chunk_size"]
        if not 1 <= chunk_size <= MAX_CHUNK:
            raise CommandError(f"--chunk-size must be from 1 to {MAX_CHUNK:,}, not {chunk_size}")
        flags = given(options, filters)
        if options["ids"] and (flags or options["all"]):
            raise CommandError(f"{action} takes job ids or filters, not both: drop the ids or "
                               f"{' '.join(flags) or '--all'}")
        if options["all"] and flags:
            raise CommandError(f"--all is every job {action} can change: give it alone, or "
                               f"{' '.join(flags)} without it")
        if options["ids"]:
            return check_job_ids(options["ids"])
        if not flags and not options["all"]:
            raise CommandError(
                f"{action} takes job ids, filters ({', '.join(f.flag for f in filters)}), or "
                f"--all for every job it can change; none given")
        return select(alias, options, filters)

    def _report(self, out: str, notes: list[str], missing: tuple[int, ...],
                refused: tuple[KeyHeld, ...] = ()) -> None:
        """The summary on stdout, what was left alone on stderr; then fail naming the jobs
        refused (exit 1), else the ids that name no job (exit 3)."""
        self.stdout.write(out)
        for note in notes:
            self.stderr.write(note)
        if refused:
            if missing:
                self.stderr.write(missing_error(missing))
            self._refused(refused)
        if missing:
            raise CommandError(missing_error(missing), returncode=3)

    def _refused(self, refused: tuple[KeyHeld, ...]) -> None:
        """Fail with the jobs whose key another job holds, one line each
        (rule 107 (retry-takes-key-back))."""
        if not refused:
            return
        for held in refused[1:]:
            self.stderr.write(f"not retried: {held}")
        more = f" (and {len(refused) - 1} more above)" if len(refused) > 1 else ""
        raise CommandError(f"not retried: {refused[0]}{more}; retry --keyless runs it without "
                           "the key, beside that job")

    def _pause(self, alias: str, options: dict[str, Any]) -> None:
        queue = options["queue"]
        if pause_queue(queue, reason=options["reason"], by=_actor(), using=alias):
            self.stdout.write(f"paused queue {queue!r}: workers stop claiming from it at their "
                              "next claim; runs in flight finish; enqueue still works")
            return
        pause = paused_queues(using=alias).get(queue)  # None: resumed in between
        since = (f" (since {pause.paused_at:%Y-%m-%d %H:%M:%S}, by {pause.paused_by or '?'})"
                 if pause is not None else "")
        self.stdout.write(f"queue {queue!r} was paused already{since}")

    def _resume(self, alias: str, options: dict[str, Any]) -> None:
        queue = options["queue"]
        if resume_queue(queue, by=_actor(), using=alias):
            self.stdout.write(f"resumed queue {queue!r}: workers claim from it again")
        else:
            self.stdout.write(f"queue {queue!r} was not paused")
