"""Which jobs ``manage.py ultjobs list``, ``cancel`` and ``retry`` mean: their filter flags, each
checked before any SQL and read into one queryset.

A filter is one ``Filter``: its flag, its help, how a value is checked and how the values given
narrow the jobs. Filters combine with AND; the values of one repeated flag with OR (``--tag``:
AND, a job carries every tag given). A new filter is one more entry in the commands' lists.
"""

from __future__ import annotations

import re
from argparse import ArgumentParser
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.db.models.functions import Now
from django.utils.dateparse import parse_datetime

from ..core.tags import check_tags, tagged
from ..exceptions import OperationInputError
from ..models import Batch, Job, JobStatus, Workflow
from ..operations import check_job_name, check_queue_name

#: ``90s``, ``15m``, ``2h``, ``7d``, ``1w``. ASCII digits only: ``\d`` would read
#: Arabic-Indic digits as a span too.
_SPAN = re.compile(r"^\s*(?P<n>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>s|m|h|d|w)\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: The longest span read: past it, a typo (``5000d``) more likely than a meaning.
MAX_SPAN = timedelta(days=100 * 365)
SPANS = "90s, 15m, 2h, 7d, 1w"


@dataclass(frozen=True)
class Filter:
    """One filter flag: ``check`` reads a value given (refusing it before any SQL) and
    ``narrow`` keeps the jobs matching the values given."""

    flag: str
    metavar: str
    help: str
    check: Callable[[str], Any]
    narrow: Callable[[QuerySet[Job], list[Any]], QuerySet[Job]]
    repeatable: bool = True
    choices: Sequence[str] | None = None

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


def parse_span(text: str, flag: str) -> timedelta:
    """A span of time as ``flag`` takes it (``90s``, ``15m``, ``2h``, ``7d``, ``1w``)."""
    match = _SPAN.match(text)
    if match is None:
        raise OperationInputError(f"{flag} takes a span of time ({SPANS}), not {text!r}")
    seconds = float(match["n"]) * _UNIT_SECONDS[match["unit"]]
    # Compared before timedelta() is built: a span past its range would overflow, not refuse.
    if seconds > MAX_SPAN.total_seconds():
        raise OperationInputError(f"{flag} {text!r} reaches back more than 100 years")
    return timedelta(seconds=seconds)


def parse_since(text: str) -> timedelta | datetime:
    """What ``--since`` names: a span back from now or an ISO 8601 time (UTC unless it says
    otherwise); refused in one line otherwise."""
    if _SPAN.match(text):
        return parse_span(text, "--since")
    try:
        moment = parse_datetime(text.strip())
    except ValueError:
        moment = None
    if moment is None:
        raise OperationInputError(
            f"--since takes a span back from now ({SPANS}) or an ISO 8601 time "
            f"(2026-12-04T09:30), not {text!r}")
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    try:
        moment.astimezone(UTC)
    except OverflowError:
        # SQLite's adapter converts to UTC and would raise where PostgreSQL compares as given.
        raise OperationInputError(f"--since {text!r} is out of range once read as UTC") from None
    return moment


def _moment(value: timedelta | datetime) -> Any:
    """A moment to compare a column with: a span counts back from the database's clock."""
    return Now() - value if isinstance(value, timedelta) else value


def _check_tag(tag: str) -> str:
    return check_tags("", [tag], subject="--tag")[0]


def _tagged_all(jobs: QuerySet[Job], tags: list[str]) -> QuerySet[Job]:
    for tag in tags:
        jobs = tagged(jobs, tag)
    return jobs


def status_filter(statuses: Sequence[str], what: str) -> Filter:
    """``--status``, among ``statuses`` (what the command can act on)."""
    return Filter("--status", "STATUS", f"Only {what} jobs in this status (repeat for several).",
                  str, lambda jobs, values: jobs.filter(status__in=values), choices=statuses)


def since_filter(field: str, what: str) -> Filter:
    """``--since``: ``field`` (a time column) at or after the moment given."""
    return Filter("--since", "WHEN", f"Only jobs {what} since: {SPANS}, or an ISO 8601 time.",
                  parse_since,
                  lambda jobs, values: jobs.filter(**{f"{field}__gte": _moment(values[-1])}),
                  repeatable=False)


QUEUE = Filter("--queue", "QUEUE", "Only jobs of this queue (repeat for several).",
               check_queue_name, lambda jobs, values: jobs.filter(queue__in=values))
JOB = Filter("--job", "NAME", "Only jobs of this name (repeat for several).",
             check_job_name, lambda jobs, values: jobs.filter(name__in=values))
TAG = Filter("--tag", "TAG", "Only jobs tagged so (repeat: jobs carrying every one).",
             _check_tag, _tagged_all)
OLDER_THAN = Filter(
    "--older-than", "SPAN", f"Only jobs enqueued more than this long ago: {SPANS}.",
    lambda text: parse_span(text, "--older-than"),
    lambda jobs, values: jobs.filter(created_at__lt=Now() - values[-1]), repeatable=False)


def _group_id(text: str) -> int:
    """A batch's or workflow's id: ASCII digits only."""
    if not (text.isascii() and text.isdecimal()):
        raise OperationInputError(f"an id is a whole number in the digits 0-9, not {text!r}")
    return int(text)


Narrow = Callable[[QuerySet[Job], list[Any]], QuerySet[Job]]


def _in_group(model: type[Batch] | type[Workflow], field: str, *,
              waiting_left_out: bool = False) -> Narrow:
    """Narrow to the jobs of the groups given, each refused in one line if no group has it.
    ``waiting_left_out``: leave pending jobs out, so what waits follows its ``when=`` as when a
    batch or workflow is cancelled whole (rule 115 (group-cancel))."""
    def narrow(jobs: QuerySet[Job], ids: list[Any]) -> QuerySet[Job]:
        alias = jobs.db
        found = set(model.objects.using(alias).filter(id__in=ids).values_list("id", flat=True))
        for group_id in ids:
            if group_id not in found:
                raise OperationInputError(
                    f"no {model._meta.model_name} has id {group_id} in database {alias!r}")
        jobs = jobs.filter(**{f"{field}__in": ids})
        return jobs.exclude(status=JobStatus.PENDING) if waiting_left_out else jobs
    return narrow


BATCH = Filter("--batch", "ID", "Only the members of this batch (repeat for several).",
               _group_id, _in_group(Batch, "batch_id"))
WORKFLOW = Filter("--workflow", "ID", "Only the jobs of this workflow (repeat for several).",
                  _group_id, _in_group(Workflow, "workflow_id"))
#: ``cancel --batch``/``--workflow``: the members that do not wait, as cancelling the group.
CANCEL_BATCH = Filter("--batch", "ID", "Cancel this batch: its members that do not wait "
                      "(repeat for several).", _group_id,
                      _in_group(Batch, "batch_id", waiting_left_out=True))
CANCEL_WORKFLOW = Filter("--workflow", "ID", "Cancel this workflow: its jobs that do not wait "
                         "(repeat for several).", _group_id,
                         _in_group(Workflow, "workflow_id", waiting_left_out=True))


def add_filters(parser: ArgumentParser, filters: Sequence[Filter]) -> None:
    """Add each filter's flag to ``parser``."""
    for each in filters:
        parser.add_argument(each.flag, dest=each.dest, metavar=each.metavar, help=each.help,
                            action="append" if each.repeatable else "store",
                            choices=each.choices)


def given(options: dict[str, Any], filters: Sequence[Filter]) -> list[str]:
    """The flags of ``filters`` given in ``options``."""
    return [each.flag for each in filters if options.get(each.dest)]


def select(alias: str, options: dict[str, Any], filters: Sequence[Filter]) -> QuerySet[Job]:
    """The jobs of ``alias`` matching every filter given, newest first; every value is checked
    before the queryset is built (no SQL runs here)."""
    checked = []
    for each in filters:
        values = options.get(each.dest)
        if values:
            values = values if isinstance(values, list) else [values]
            checked.append((each, [each.check(value) for value in values]))
    jobs = Job.objects.using(alias).order_by("-id")
    for each, values in checked:
        jobs = each.narrow(jobs, values)
    return jobs
