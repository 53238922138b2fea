"""``manage.py prunejobs``: keep the job tables bounded (run it from cron, daily)."""

from __future__ import annotations

from argparse import ArgumentParser
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_ultjobs.conf import get_settings
from django_ultjobs.retention import prune


class Command(BaseCommand):
    help = ("Delete jobs that finished more than ULTJOBS['RETENTION_DAYS'] days ago, with their "
            "attempts and steps, plus old events and workers not seen since.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--days", type=float, default=None,
                            help="Keep this many days (default: ULTJOBS['RETENTION_DAYS']).")
        parser.add_argument("--batch-size", type=int, default=5_000)
        parser.add_argument("--database", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        conf = get_settings()
        days = options["days"] if options["days"] is not None else conf.RETENTION_DAYS
        if days is None:
            raise CommandError("retention is off (ULTJOBS['RETENTION_DAYS'] is None); pass --days")
        if days < 0:
            raise CommandError("--days cannot be negative")
        pruned = prune(older_than=timedelta(days=days), using=options["database"] or conf.DATABASE,
                       batch_size=options["batch_size"])
        self.stdout.write(
            f"pruned {pruned.jobs} jobs ({pruned.attempts} attempts, {pruned.steps} steps), "
            f"{pruned.events} events, {pruned.workers} workers finished or last seen more than "
            f"{days:g} days ago"
        )
