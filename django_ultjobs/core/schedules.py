"""Periodic jobs: when a schedule ticks, and which missed ticks a worker enqueues.

```python
@job(cron="*/5 * * * *", timezone="Europe/Paris")
def refresh_rates() -> None: ...

@job(every=30)
def poll_inbox() -> None: ...
```

Pure functions over a frozen ``Schedule``: no SQL and no clock of their own, so a test drives
them with any "now" it likes. The worker's scheduler (``worker/scheduler.py``) asks
``candidates`` for the ticks to offer around its estimate of the database's clock; the tick
statement keeps those the database's clock has reached, by the policy ``due`` states, and
enqueues each at most once fleet-wide (rules 60 (tick-once), 62 (catch-up-policy) and
102 (database-clock-ticks)). Cron expressions are read and stepped by ``cronsim``, which handles
time zones and DST the way Debian's cron does (docs/scheduling.md): no parser of our own.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache, cached_property
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

from ..exceptions import JobOptionError
from .numeric import is_finite, shown

#: What to do with ticks that passed while no worker was running (rule 62 (catch-up-policy)).
CATCH_UP_CHOICES = ("latest", "none", "all")
#: The most ticks one catch-up enqueues with ``catch_up="all"``: the most recent ones. A fleet
#: down for a day must not come back to 86,400 runs of an ``every=1`` job
#: (rule 62 (catch-up-policy)).
MAX_CATCH_UP = 100
#: ``every`` bounds, in seconds. Below a second the tick's row costs more than the schedule is
#: worth; past a year it is a typo.
MIN_EVERY = 1.0
MAX_EVERY = 366 * 86_400.0
#: How late a tick may be enqueued and still count as on time for ``catch_up="none"``: a worker
#: wakes for a tick a few milliseconds after it, and a busy one later still.
ON_TIME = timedelta(seconds=5)
#: How far either side of its estimate of the database's clock a worker offers ticks: the tick
#: statement keeps only those the database's clock has reached, so an estimate off by less than
#: this costs nothing, and one off by more costs one more statement
#: (rule 102 (database-clock-ticks)).
CANDIDATE_MARGIN = timedelta(seconds=5)
#: A cron expression that matches nothing in this many steps (``0 0 30 2 *``) is refused.
_MAX_CRON_STEPS = 8
#: Names ``zoneinfo`` lists that are no zone a schedule may be read in, and why: each reads
#: one cron as another instant on each host, or as none the site meant
#: (rule 64 (bad-schedule-refused)).
_HOST_ZONES = {
    "localtime": "it is each host's own zone, so workers on two hosts would enqueue one tick "
                 "at two instants; give the zone's IANA name",
    "Factory": "it is the zone of a host whose zone was never set",
}


@dataclass(frozen=True)
class Candidates:
    """The ticks a worker offers the tick statement, and what the statement needs to judge them.

    The statement, not the worker, decides which are due: those at or before the database's
    clock, after the schedule's cursor, of which the catch-up policy keeps the newest ``keep``,
    none more than ``late`` seconds late (rules 62 (catch-up-policy) and
    102 (database-clock-ticks)).
    """

    #: Oldest first.
    ticks: tuple[datetime, ...]
    #: No tick in (``floor``, ``horizon``] is missing from ``ticks``; None: none is missing
    #: since the schedule began. An offer cut short of the cursor has its oldest tick here.
    floor: datetime | None
    #: The end of the offer: the worker's estimate of the database's clock, plus a margin.
    horizon: datetime
    #: The most ticks one statement enqueues: the newest due (1), or ``MAX_CATCH_UP``.
    keep: int
    #: Seconds a kept tick may be late (``catch_up="none"``), or None for any lateness.
    late: float | None


@dataclass(frozen=True)
class Schedule:
    """When a periodic job ticks: a cron expression in a time zone, or every N seconds.

    Checked when built (at ``@job``), so a bad expression, zone or interval is refused at
    import time by its option's name, before any worker or SQL sees it
    (rule 64 (bad-schedule-refused)).
    """

    cron: str | None = None
    every: float | None = None
    timezone: str | None = None
    catch_up: str = "latest"

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise JobOptionError("a periodic job takes cron= or every=, not both")
        if self.every is not None:
            _check_every(self.every)
            if self.timezone is not None:
                raise JobOptionError(
                    "timezone= applies to cron= only: every= counts seconds, which no time "
                    "zone changes")
        else:
            _check_cron(self.cron, self.zone)
        if self.catch_up not in CATCH_UP_CHOICES:
            raise JobOptionError(
                f"catch_up must be one of {', '.join(map(repr, CATCH_UP_CHOICES))}, not "
                f"{self.catch_up!r}")

    @cached_property
    def zone(self) -> ZoneInfo:
        """The time zone the cron expression is read in (UTC unless ``timezone=`` says)."""
        return _zone("UTC" if self.timezone is None else self.timezone)

    @cached_property
    def _step(self) -> int:
        """``every`` in microseconds, rounded to the millisecond."""
        return round(float(self.every or 0) * 1000) * 1000

    def describe(self) -> str:
        """``every 30 s`` or ``*/5 * * * *``, as the admin and the logs show it."""
        if self.every is not None:
            return f"every {_exact(self.every)} s"
        return str(self.cron)

    def next_tick(self, after: datetime) -> datetime:
        """The first tick strictly after ``after``, in UTC.

        Interval ticks are the multiples of ``every`` since the Unix epoch, in whole
        milliseconds (the finest both engines' clocks compare), so every worker computes the
        same instants whatever its start time.
        """
        if self.every is not None:
            step = self._step
            micros = _epoch_micros(after)
            return _from_epoch_micros((micros // step + 1) * step)
        return _next_cron(str(self.cron), self.zone, after)

    @property
    def keep(self) -> int:
        """The most ticks one catch-up enqueues: the newest, or the newest ``MAX_CATCH_UP``."""
        return MAX_CATCH_UP if self.catch_up == "all" else 1

    @property
    def late(self) -> float | None:
        """Seconds a tick may be late and still run (``catch_up="none"``), None for any."""
        return ON_TIME.total_seconds() if self.catch_up == "none" else None

    def due(self, cursor: datetime, now: datetime) -> list[datetime]:
        """The ticks to enqueue when the database's clock reads ``now``, oldest first: those in
        ``(cursor, now]`` that the catch-up policy keeps (rule 62 (catch-up-policy)).

        ``cursor`` is the newest tick dealt with (or when the schedule began). A tick is missed
        when it is more than ``ON_TIME`` late: ``latest`` keeps only the newest due tick,
        ``none`` keeps it only when it is on time, ``all`` keeps the newest ``MAX_CATCH_UP``.
        The tick statement applies this policy in SQL on the database's clock
        (rule 102 (database-clock-ticks)); the conformance tests hold the statement to this
        function.
        """
        ticks = self._ticks_between(cursor, now, self.keep)
        if not ticks:
            return []
        late = self.late
        if late is not None and (now - ticks[-1]).total_seconds() > late:
            return []
        return ticks

    def candidates(self, cursor: datetime, around: datetime,
                   margin: timedelta = CANDIDATE_MARGIN) -> Candidates:
        """The ticks to offer the tick statement when the database's clock reads about
        ``around`` (rule 102 (database-clock-ticks)): every tick after ``cursor`` up to ``around +
        margin``.

        A cursor far behind (the fleet down for a day) is not offered whole: only the newest
        ``keep`` ticks up to ``around - margin``, with every tick after them, which is all the
        policy can keep while the database's clock is within ``margin`` of ``around``.
        """
        older = self._ticks_between(cursor, around - margin, self.keep)
        # Every tick of the window: MIN_EVERY apart at the closest, none more than a cron's.
        window = int(2 * margin.total_seconds() / MIN_EVERY) + 1
        newer = self._ticks_between(max(cursor, around - margin), around + margin, window)
        cut_short = len(older) == self.keep
        return Candidates(ticks=tuple(older + newer), floor=older[0] if cut_short else cursor,
                          horizon=around + margin, keep=self.keep, late=self.late)

    def _ticks_between(self, cursor: datetime, now: datetime, limit: int) -> list[datetime]:
        """The newest ``limit`` ticks in ``(cursor, now]``, oldest first.

        Counted back from ``now``, so the work is ``limit`` ticks however long ago the cursor
        is: a minutely cron whose fleet was down for a year is not stepped through 525,600
        times to find its latest tick.
        """
        if self.every is not None:
            step = self._step
            last = _epoch_micros(now) // step
            first = max(_epoch_micros(cursor) // step + 1, last - limit + 1)
            return [_from_epoch_micros(n * step) for n in range(first, last + 1)]
        ticks: list[datetime] = []
        for tick in _cron_backwards(str(self.cron), self.zone, now):
            if tick <= cursor or len(ticks) == limit:
                break
            ticks.append(tick)
        return ticks[::-1]


def schedule_from_options(cron: str | None, every: float | timedelta | None,
                          timezone: str | None, catch_up: str) -> Schedule | None:
    """The schedule ``@job(cron=..., every=..., timezone=..., catch_up=...)`` asks for, or None
    for a job that is not periodic (then ``timezone`` and ``catch_up`` must be left alone)."""
    if cron is None and every is None:
        if timezone is not None or catch_up != "latest":
            raise JobOptionError("timezone= and catch_up= apply to a periodic job: add cron= "
                                 "or every=")
        return None
    if isinstance(every, timedelta):
        every = every.total_seconds()
    return Schedule(cron=cron, every=every, timezone=timezone, catch_up=catch_up)


def described(text: str, timezone: str = "", catch_up: str = "latest") -> Schedule | None:
    """The schedule ``Schedule.describe()`` wrote as ``text`` (a schedule's row), or None when
    it cannot be read back (a row of another version)."""
    try:
        if text.startswith("every ") and text.endswith(" s"):
            return Schedule(every=float(text[6:-2]), catch_up=catch_up)
        return Schedule(cron=text, timezone=timezone or None, catch_up=catch_up)
    except (ValueError, JobOptionError):
        return None


def _exact(seconds: float) -> str:
    """``seconds`` in digits ``float()`` reads back as the same number, which ``described`` and
    the admin rely on: a whole number without a point or an exponent, any other as ``repr``
    writes it (``{:g}`` kept six digits, so 123456.7 was shown and read back as 123457)."""
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def check_callable_without_arguments(name: str, func: Callable[..., Any],
                                     takes_context: bool) -> None:
    """Refuse a periodic job whose body needs an argument: a tick has none to give
    (rule 64 (bad-schedule-refused))."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return
    params = list(signature.parameters.values())
    if takes_context and params:
        params = params[1:]
    required = [p.name for p in params
                if p.default is inspect.Parameter.empty
                and p.kind not in (inspect.Parameter.VAR_POSITIONAL,
                                   inspect.Parameter.VAR_KEYWORD)]
    if required:
        raise JobOptionError(
            f"job {name!r} is periodic, so every parameter needs a default (a tick enqueues it "
            f"with no arguments); {', '.join(required)} has none")


# -- checks ---------------------------------------------------------------------------------------


def _check_every(every: Any) -> None:
    if isinstance(every, bool) or not isinstance(every, (int, float)):
        raise JobOptionError(f"every must be a number of seconds or a timedelta, not {every!r}")
    if not is_finite(every) or not MIN_EVERY <= every <= MAX_EVERY:
        raise JobOptionError(
            f"every must be from {MIN_EVERY:g} second to {MAX_EVERY:,.0f} seconds (366 days), "
            f"not {shown(every)}")


def _check_cron(cron: Any, zone: ZoneInfo) -> None:
    if not isinstance(cron, str) or not cron.strip():
        raise JobOptionError(f"cron must be a cron expression like '*/5 * * * *', not "
                             f"{shown(cron)}")
    if len(cron) > 200:  # the schedules table keeps it in 200 characters
        raise JobOptionError(f"cron must be at most 200 characters, not {len(cron)}")
    try:
        iterator = CronSim(cron, datetime(2000, 1, 1, tzinfo=zone))
        next(iterator)
    except CronSimError as exc:
        raise JobOptionError(f"cron {cron!r} is refused: {exc} (five fields: minute hour "
                             "day-of-month month day-of-week)") \
            from None
    except StopIteration:
        raise JobOptionError(f"cron {cron!r} never matches a date") from None


@cache
def iana_zones() -> frozenset[str]:
    """The time zone names a schedule may be read in: those of the IANA database, as
    ``zoneinfo.available_timezones()`` lists them on this host, less the host's own names
    (``_HOST_ZONES``). Not listed, though ``ZoneInfo`` loads them where a host has them: the
    ``posix/`` and ``right/`` copies of the database and ``posixrules`` (a ``right/`` zone
    counts leap seconds, so its offset changes fall 27 s late on the database's clock). Read
    from disk once a process."""
    return frozenset(available_timezones()) - _HOST_ZONES.keys()


def _zone(name: Any) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise JobOptionError(f"timezone must be an IANA zone name like 'Europe/Paris' (leave it "
                             f"out for UTC), not {shown(name)}")
    if name not in iana_zones():
        if not iana_zones():
            raise JobOptionError(f"timezone {name!r} cannot be read: this host has no time zone "
                                 "database; install the tzdata package")
        raise JobOptionError(f"timezone {name!r} is no IANA time zone (e.g. 'Europe/Paris', "
                             f"'UTC'){_zone_hint(name)}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise JobOptionError(f"timezone {name!r} cannot be read on this host: reinstall its "
                             "time zone database, or install the tzdata package") from None


def _zone_hint(name: str) -> str:
    """Why a name ``ZoneInfo`` may load is still refused, after a colon; "" for the others."""
    if name in _HOST_ZONES:
        return f": {_HOST_ZONES[name]}"
    for copy in ("posix/", "right/"):
        if name.startswith(copy) and name.removeprefix(copy) in iana_zones():
            return f": give its IANA name, {name.removeprefix(copy)!r}"
    return ""


# -- instants -------------------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _epoch_micros(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _from_epoch_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


#: How far past ``now`` a backward walk starts: more than any DST change moves a wall clock.
_FOLD_MARGIN = timedelta(hours=3)


def _cron_backwards(cron: str, zone: ZoneInfo, now: datetime) -> Iterator[datetime]:
    """The instants matching ``cron`` in ``zone`` at or before ``now``, newest first, in UTC.

    ``cronsim`` reads the start's wall clock without its ``fold`` (inside the hour a DST change
    repeats, two instants have one wall clock), so the walk starts a few hours later, where no
    ambiguity can hide a tick, and skips what lies after ``now``.
    """
    now = now.astimezone(UTC)
    for local in CronSim(cron, (now + _FOLD_MARGIN).astimezone(zone), reverse=True):
        tick = local.astimezone(UTC)
        if tick <= now:
            yield tick


def _next_cron(cron: str, zone: ZoneInfo, after: datetime) -> datetime:
    """The first instant after ``after`` matching ``cron`` read in ``zone``, in UTC.

    ``cronsim`` steps local wall-clock times and reads the start's wall clock without its
    ``fold``: started inside the hour a DST change repeats, it may answer an instant before
    ``after``. Steps that land at or before ``after`` are skipped.
    """
    after = after.astimezone(UTC)
    iterator = CronSim(cron, after.astimezone(zone))
    for _ in range(_MAX_CRON_STEPS):
        tick = next(iterator).astimezone(UTC)
        if tick > after:
            return tick
    raise JobOptionError(f"cron {cron!r} found no tick after {after.isoformat()}")
