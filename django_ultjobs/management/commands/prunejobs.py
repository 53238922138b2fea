"""``manage.py prunejobs``: keep the job tables bounded, by hand (the built-in periodic job
``django_ultjobs.prune`` does the same daily; docs/scheduling.md)."""

from __future__ import annotations

from argparse import ArgumentParser
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, InterfaceError, connections

from django_ultjobs.conf import get_settings
from django_ultjobs.core.numeric import is_finite, shown
from django_ultjobs.management.arguments import number, whole_number
from django_ultjobs.management.messages import one_line, unknown_alias, unmigrated
from django_ultjobs.management.progress import Progress
from django_ultjobs.store import get_store
from django_ultjobs.store.retention import prunable_jobs, prune

#: The longest retention ``--days`` takes: a hundred years. Far past it the cut-off date falls
#: before year 1 and the date arithmetic overflows.
MAX_DAYS = 36_500
#: The longest --pause: a minute between batches is a prune that never ends.
MAX_PAUSE = 60


class Command(BaseCommand):
    help = ("Delete jobs that finished more than ULTJOBS['RETENTION_DAYS'] days ago, with their "
            "attempts and steps, plus old events, workers not seen since, and the batches and "
            "workflows none of whose jobs is left. Queued, running, waiting and pending jobs "
            "are never touched.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--days", type=number, default=None,
                            help="Keep what finished within this many days, 0 to "
                                 f"{MAX_DAYS} (default: ULTJOBS['RETENTION_DAYS']).")
        parser.add_argument("--batch-size", type=whole_number, default=5_000,
                            help="Jobs deleted per transaction; each is short, so the claim "
                                 "is never held up for long (default: %(default)s).")
        parser.add_argument("--pause", type=number, default=None,
                            help="Seconds to wait after each batch, to spread the prune's "
                                 "load on the workers running beside it over more time; 0 "
                                 "runs the batches back to back (default: as long as the "
                                 "batch took, so the prune keeps a core busy half the time).")
        parser.add_argument("--database", default=None,
                            help="Database alias of the job tables (default: ULTJOBS "
                                 "DATABASE).")
        parser.add_argument("--dry-run", action="store_true",
                            help="Say what would be deleted; delete nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        conf = get_settings()
        days = self._days(options["days"], conf.RETENTION_DAYS)
        batch_size = options["batch_size"]
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise CommandError(f"--batch-size must be a whole number from 1, not {batch_size!r}")
        pause = options["pause"]
        if pause is not None and (isinstance(pause, bool) or not isinstance(pause, int | float)
                                  or not is_finite(pause) or not 0 <= pause <= MAX_PAUSE):
            raise CommandError(f"--pause must be a number of seconds from 0 to {MAX_PAUSE}, "
                               f"not {shown(pause)}")
        alias = options["database"]
        if alias is not None and alias not in connections.settings:
            raise CommandError(unknown_alias(alias))
        alias = alias or conf.DATABASE
        dry_run = options["dry_run"]
        try:
            with Progress("pruning", unit="job", stream=self.stderr) as progress:
                if progress.shown and not dry_run:
                    # Only the bar needs the total (for its time left): off a terminal, no count.
                    progress.set_total(prunable_jobs(older_than=timedelta(days=days),
                                                     using=alias))
                pruned = prune(older_than=timedelta(days=days), using=alias,
                               batch_size=batch_size, dry_run=dry_run,
                               on_batch=progress.advance, pause=pause)
        except (DatabaseError, InterfaceError) as exc:
            raise CommandError(_database_error(alias, exc)) from exc
        except ImproperlyConfigured as exc:  # a DATABASES entry whose ENGINE does not import
            raise CommandError(one_line(exc)) from exc
        verb = "would prune" if dry_run else "pruned"
        self.stdout.write(
            f"{verb} {pruned.jobs} jobs ({pruned.attempts} attempts, {pruned.steps} steps), "
            f"{pruned.events} events, {pruned.workers} workers finished or last seen more than "
            f"{days:g} days ago, {pruned.batches} batches and {pruned.workflows} workflows with "
            "no job left" + (" (dry run: nothing was deleted)" if dry_run else
                                    f", {progress.summary()}")
        )

    @staticmethod
    def _days(flag: Any, setting: Any) -> float:
        """The retention in days, from ``--days`` or the setting; refused by name when it is
        not a finite number from 0 to ``MAX_DAYS`` (``nan`` passes every comparison)."""
        if flag is None and setting is None:
            raise CommandError("retention is off (ULTJOBS['RETENTION_DAYS'] is None); pass --days")
        name, days = ("--days", flag) if flag is not None else (
            "ULTJOBS['RETENTION_DAYS']", setting)
        if isinstance(days, bool) or not isinstance(days, int | float) \
                or not is_finite(days) or not 0 <= days <= MAX_DAYS:
            raise CommandError(f"{name} must be a number of days from 0 to {MAX_DAYS}, "
                               f"not {shown(days)}")
        return float(days)


def _database_error(alias: str, exc: BaseException) -> str:
    """One line saying what is wrong with the database and what to do about it."""
    if get_store(alias).schema_missing(exc):
        return unmigrated(alias)
    return f"database {alias!r} cannot be pruned now: {one_line(exc)}"
