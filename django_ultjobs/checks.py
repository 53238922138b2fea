"""System checks: misconfiguration reported by ``manage.py check`` with stable ids."""

from __future__ import annotations

import re
from typing import Any

from django.core.checks import CheckMessage, Error, Warning, register
from django.db import connections

from .conf import get_settings
from .core.numeric import is_finite, is_seconds, shown
from .core.retry import MAX_DELAY
from .exceptions import JobConfigurationError

#: The largest JSON string PostgreSQL's jsonb holds (2**28 - 1 bytes).
MAX_STORABLE_RESULT = 268_435_455


@register("django_ultjobs")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check ``ULTJOBS`` and the database it points at."""
    try:
        conf = get_settings()
    except JobConfigurationError as exc:
        return [Error(str(exc), id="django_ultjobs.E001")]
    messages: list[CheckMessage] = []
    if not isinstance(conf.DATABASE, str) or conf.DATABASE not in connections.settings:
        messages.append(Error(
            f"ULTJOBS['DATABASE'] is {shown(conf.DATABASE)}, which is not an alias in DATABASES",
            hint="Set it to the alias that holds the job tables.",
            id="django_ultjobs.E002",
        ))
        return messages
    messages.extend(_check_store(conf.STORE))
    vendor = connections[conf.DATABASE].vendor
    if vendor not in {"postgresql", "sqlite"} and not conf.STORE:
        messages.append(Error(
            f"DATABASES[{conf.DATABASE!r}] is {vendor}; django_ultjobs runs on PostgreSQL "
            "and SQLite",
            id="django_ultjobs.E003",
        ))
    messages.extend(_check_result_bound(conf.MAX_RESULT_BYTES))
    if vendor == "sqlite":
        messages.extend(_check_sqlite_writers(conf.DATABASE))
    timings = _check_worker_timings(conf)
    messages.extend(timings)
    if not timings and conf.HEARTBEAT_INTERVAL * 2 > conf.VISIBILITY_TIMEOUT:
        messages.append(Warning(
            "ULTJOBS HEARTBEAT_INTERVAL is more than half of VISIBILITY_TIMEOUT: one failed "
            "heartbeat could cost a running job its lease",
            hint="Use a heartbeat interval of a third of the timeout or less: runjobworker "
                 "refuses to start with these two unless its --heartbeat-interval or "
                 "--visibility-timeout flag overrides them.",
            id="django_ultjobs.W001",
        ))
    messages.extend(_check_unknown_jobs(conf))
    retention = _check_retention(conf.RETENTION_DAYS)
    messages.extend(retention or _check_unique_windows(conf.RETENTION_DAYS))
    messages.extend(_check_gauge_interval(conf.GAUGE_INTERVAL))
    messages.extend(_check_stats_token(conf.STATS_TOKEN))
    return messages


#: The shortest bearer token the stats view accepts: shorter ones are guessed.
MIN_STATS_TOKEN = 16


def _check_stats_token(token: object) -> list[CheckMessage]:
    """``STATS_TOKEN``: None, or a string of at least ``MIN_STATS_TOKEN`` characters; anything
    else would be compared as something it is not, or guessed (rule 120 (bounded-live-stats))."""
    if token is None or (isinstance(token, str) and len(token) >= MIN_STATS_TOKEN
                         and token.strip() == token):
        return []
    what = (f"a string of {len(token)} characters" if isinstance(token, str)
            else f"a {type(token).__name__}")
    return [Error(
        f"ULTJOBS['STATS_TOKEN'] is {what}; it must be None or a string of at least "
        f"{MIN_STATS_TOKEN} characters with no space around it",
        hint="Generate one with python -c 'import secrets; print(secrets.token_urlsafe(32))', "
             "read it from the environment, or leave it out to allow staff sessions only.",
        id="django_ultjobs.E060",
    )]


def _check_store(store: Any) -> list[CheckMessage]:
    """``STORE``: None, or the dotted path of a JobStore class that ``get_store`` imports."""
    if store is None or (isinstance(store, str) and _is_dotted_name(store)):
        return []
    return [Error(
        f"ULTJOBS['STORE'] is {shown(store)}; it must be the dotted path of a JobStore class, "
        "or None",
        hint="Leave it out: the store of the database's engine is used.",
        id="django_ultjobs.E004",
    )]


#: The settings ``runjobworker``'s timing flags default from, and the flag each one fills.
_WORKER_TIMINGS = {"VISIBILITY_TIMEOUT": "--visibility-timeout",
                   "HEARTBEAT_INTERVAL": "--heartbeat-interval",
                   "POLL_INTERVAL": "--poll-interval"}


def _check_worker_timings(conf: Any) -> list[CheckMessage]:
    """The worker's timings, bounded as its flags are (rule 18 (start-mistake-named)): a value past
    them made ``runjobworker`` refuse to start, or crash with an ``OverflowError`` for an int past a
    float's range, while ``manage.py check`` said nothing."""
    from .worker.options import MAX_SECONDS  # not at import: a web process runs no worker

    return [
        Error(
            f"ULTJOBS[{key!r}] is {shown(getattr(conf, key))}; it must be a number of seconds "
            f"from more than 0 to {MAX_SECONDS:.0f} (one day)",
            hint=f"runjobworker's {flag} takes this value when the flag is not given.",
            id="django_ultjobs.E005",
        )
        for key, flag in _WORKER_TIMINGS.items()
        if not is_seconds(getattr(conf, key), MAX_SECONDS)
    ]


def _check_retention(days: Any) -> list[CheckMessage]:
    """``RETENTION_DAYS``: None, or the days ``prunejobs --days`` takes
    (rule 18 (start-mistake-named))."""
    from .management.commands.prunejobs import MAX_DAYS

    if days is None or (isinstance(days, int | float) and not isinstance(days, bool)
                        and is_finite(days) and 0 <= days <= MAX_DAYS):
        return []
    return [Error(
        f"ULTJOBS['RETENTION_DAYS'] is {shown(days)}; it must be a number of days from 0 to "
        f"{MAX_DAYS}, or None to keep every finished job",
        hint="prunejobs and the built-in prune job delete what finished more than this many "
             "days ago (default 14).",
        id="django_ultjobs.E045",
    )]


def _check_unique_windows(retention_days: Any) -> list[CheckMessage]:
    """A ``unique_for`` longer than ``RETENTION_DAYS``: ``prunejobs`` deletes a finished job,
    and the key it held with it, once it finished that many days ago, so such a throttle ends
    there (rule 67 (unique-for-window))."""
    from .jobs.registry import registered_jobs

    if retention_days is None:
        return []
    kept = retention_days * 86400.0
    return [
        Warning(
            f"job {spec.name!r} has unique_for={spec.unique_for:g} s, longer than "
            f"ULTJOBS['RETENTION_DAYS'] ({retention_days:g} days): prunejobs deletes the "
            "finished job, and the key it holds, before the window ends",
            hint="Keep finished jobs longer than the longest unique_for, or shorten it.",
            id="django_ultjobs.W045",
        )
        for spec in registered_jobs().values() if spec.unique_for > kept
    ]


#: A gauge interval below this is a count over the runnable jobs more than once a second.
_BRISK_GAUGE_INTERVAL = 1.0


def _check_gauge_interval(interval: Any) -> list[CheckMessage]:
    """``GAUGE_INTERVAL``: how often the fleet's sampling worker reads the gauges
    (rule 71 (gauges-one-reader)); a day at most, as the worker's other timings (far past it, its
    sleep overflows)."""
    from .worker.options import MAX_SECONDS

    if not is_seconds(interval, MAX_SECONDS):
        return [Error(
            f"ULTJOBS['GAUGE_INTERVAL'] is {shown(interval)}; it must be a number of seconds "
            f"from more than 0 to {MAX_SECONDS:.0f} (one day)",
            hint="Leave it out for the default, 15 s (docs/operations.md).",
            id="django_ultjobs.E050",
        )]
    if interval < _BRISK_GAUGE_INTERVAL:
        return [Warning(
            f"ULTJOBS['GAUGE_INTERVAL'] is {interval!r}: the sampling worker counts the "
            "runnable jobs more than once a second, a load on the database no dashboard needs",
            hint="Use a few seconds or more; Prometheus scrapes every 15 to 60 s.",
            id="django_ultjobs.W050",
        )]
    return []


def _check_unknown_jobs(conf: Any) -> list[CheckMessage]:
    """The settings of unknown jobs (rules 12 (unknown-job-parked) and 40 (project-imports-only)): a
    bad one would wedge or widen them."""
    messages: list[CheckMessage] = []
    for key, allow_none in (("UNKNOWN_JOB_TIMEOUT", True), ("UNKNOWN_JOB_DELAY", False)):
        value = getattr(conf, key)
        if value is None and allow_none:
            continue
        # At most what a settle adds to the database's clock (rule 31 (bounded-outcomes)).
        if not is_seconds(value, MAX_DELAY):
            messages.append(Error(
                f"ULTJOBS[{key!r}] is {shown(value)}; it must be a number of seconds from more "
                f"than 0 to {MAX_DELAY:.0f} (a hundred years){' or None' if allow_none else ''}",
                hint=("UNKNOWN_JOB_TIMEOUT is how long a job no worker knows stays parked before "
                      "it fails (default 7 days); UNKNOWN_JOB_DELAY how long each parking lasts "
                      "(default 30 s)."),
                id="django_ultjobs.E020",
            ))
    modules = conf.JOB_MODULES
    if isinstance(modules, str) or not isinstance(modules, (list, tuple)) or not all(
            isinstance(m, str) and _is_dotted_name(m) for m in modules):
        messages.append(Error(
            f"ULTJOBS['JOB_MODULES'] is {shown(modules)}; it must be a list of dotted module "
            "names",
            hint=("List the packages or modules outside INSTALLED_APPS whose jobs a worker may "
                  "import, e.g. ['myproject.tasks']."),
            id="django_ultjobs.E021",
        ))
    return messages


def _check_result_bound(limit: object) -> list[CheckMessage]:
    """``MAX_RESULT_BYTES``: a positive whole number; past what PostgreSQL can store, a warning
    (such a result still ends well, failed by the database's refusal
    (rule 30 (refused-outcome-no-wedge)), only later and dearer than the worker's own check would
    have)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        return [Error(
            f"ULTJOBS['MAX_RESULT_BYTES'] is {shown(limit)}; it must be a whole number of bytes, "
            "at least 1",
            hint="Leave it out for the default, 4 MiB (4194304).",
            id="django_ultjobs.E022",
        )]
    if limit > MAX_STORABLE_RESULT:
        return [Warning(
            f"ULTJOBS['MAX_RESULT_BYTES'] is {shown(limit)}; PostgreSQL refuses a JSON string over "
            f"{MAX_STORABLE_RESULT} bytes, so a result that large fails all the same",
            hint="Keep big data out of results: store it elsewhere and return a reference.",
            id="django_ultjobs.W022",
        )]
    return []


# -- SQLite in production --------------------------------------------------------------------------

#: The busy timeout below which a worker fleet and a web process on one SQLite file give up on
#: each other's writes ("database is locked") in ordinary bursts; Python's default is 5 s.
_MIN_SQLITE_TIMEOUT = 5.0


def _check_sqlite_writers(alias: str) -> list[CheckMessage]:
    """Warn when the SQLite jobs database lets a transaction fail instead of waiting its turn."""
    from .store.sqlite import WRITER_MODES, transaction_mode

    connection = connections[alias]
    if connection.is_in_memory_db():
        return []
    options = connection.settings_dict.get("OPTIONS") or {}
    messages: list[CheckMessage] = []
    mode = transaction_mode(alias)
    if mode not in WRITER_MODES:
        messages.append(Warning(
            f"DATABASES[{alias!r}] is SQLite in {mode.lower()} transaction mode: a transaction "
            "of yours that reads before it enqueues a job (or writes anything) fails with "
            "\"database is locked\" whenever another connection wrote in between, instead of "
            "waiting for its turn",
            hint=_transaction_mode_hint(connection, alias),
            id="django_ultjobs.W010",
        ))
    timeout = _busy_timeout(options)
    if timeout < _MIN_SQLITE_TIMEOUT:
        messages.append(Warning(
            f"DATABASES[{alias!r}] is SQLite with a busy timeout of {timeout:g} s: a write "
            "that waits longer than that for the workers' writes fails with \"database is "
            "locked\"",
            hint=f"Set DATABASES[{alias!r}]['OPTIONS']['timeout'] = 30 (seconds).",
            id="django_ultjobs.W011",
        ))
    return messages


def _is_dotted_name(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def _transaction_mode_hint(connection: Any, alias: str) -> str:
    if "IMMEDIATE" in getattr(connection, "transaction_modes", ()):
        return (f"Set DATABASES[{alias!r}]['OPTIONS']['transaction_mode'] = 'IMMEDIATE': every "
                "transaction then begins as the writer and waits out the busy timeout.")
    return ("This Django has no OPTIONS['transaction_mode'] (Django 5.1 added it): upgrade "
            "Django, or make the first statement of each transaction that enqueues a write.")


def _busy_timeout(options: dict[str, Any]) -> float:
    """The busy timeout in seconds: a ``PRAGMA busy_timeout`` in ``init_command`` wins (it runs
    after Python's ``timeout`` is set), else ``timeout``, else Python's default of 5 s."""
    pragma = re.search(r"busy_timeout\s*=\s*(\d+)", str(options.get("init_command") or ""),
                       re.IGNORECASE)
    if pragma:
        return int(pragma.group(1)) / 1000
    try:
        return float(options.get("timeout", 5.0))
    except (TypeError, ValueError):
        return 0.0


@register("django_ultjobs")
def check_tasks_backport(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """On Django 5.2, warn when the django-tasks backport's checks (and so ours) cannot run."""
    from importlib.util import find_spec

    from django.apps import apps
    from django.conf import settings

    tasks = getattr(settings, "TASKS", None) or {}
    ours = sorted(alias for alias, params in tasks.items()
                  if str(params.get("BACKEND", "")).startswith("django_ultjobs.tasks_backend"))
    if not ours or find_spec("django.tasks") is not None or apps.is_installed("django_tasks"):
        return []
    return [Warning(
        f"TASKS {ours} use UltJobsBackend through the django-tasks backport, but "
        "'django_tasks' is not in INSTALLED_APPS, so the checks of TASKS backends never run",
        hint="Add 'django_tasks' to INSTALLED_APPS.",
        id="django_ultjobs.W103",
    )]


@register("django_ultjobs")
def check_timeouts(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W035: a job with a ``timeout`` whose body cannot see its cancellation
    (rules 55 (timeout-cancels), 56 (overrun-reported))."""
    from .jobs.registry import registered_jobs

    blind = sorted(name for name, spec in registered_jobs().items()
                   if spec.timeout is not None and not spec.takes_context)
    if not blind:
        return []
    return [Warning(
        f"job(s) {', '.join(blind)} declare timeout= without takes_context=True: the body "
        "cannot see its cancellation, so a run past its timeout is not stopped but only "
        "reported as overrunning (and ends its worker under runjobworker --exit-on-overrun)",
        hint="Add takes_context=True and call ctx.raise_if_cancelled() in the body's loops and "
             "before each side effect; Python cannot kill a thread. Or run such jobs under "
             "runjobworker --pool process, which kills a body that does not stop.",
        id="django_ultjobs.W035",
    )]


@register("django_ultjobs")
def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check the built-in prune job's schedule and the periodic jobs' time zones
    (rule 64 (bad-schedule-refused))."""
    from django.conf import settings

    from .core.schedules import Schedule
    from .exceptions import JobOptionError
    from .jobs.registry import registered_jobs

    try:
        conf = get_settings()
    except JobConfigurationError:
        return []  # django_ultjobs.E001 says why
    messages: list[CheckMessage] = []
    if conf.PRUNE_SCHEDULE is not None:
        try:
            Schedule(cron=conf.PRUNE_SCHEDULE, timezone=conf.PRUNE_TIMEZONE)
        except JobOptionError as exc:
            messages.append(Error(
                f"ULTJOBS['PRUNE_SCHEDULE'] or ULTJOBS['PRUNE_TIMEZONE']: {exc}",
                hint="Give a five-field cron expression such as '0 3 * * *' and an IANA time "
                     "zone name such as 'Europe/Paris' (not 'localtime', nor a 'posix/' or "
                     "'right/' copy), or set PRUNE_SCHEDULE to None to turn the built-in prune "
                     "off.",
                id="django_ultjobs.E040",
            ))
    site_zone = getattr(settings, "TIME_ZONE", "UTC") or "UTC"
    for name, spec in sorted(registered_jobs().items()):
        schedule = spec.schedule
        if schedule is None or schedule.cron is None or schedule.timezone is not None:
            continue
        if site_zone != "UTC":
            messages.append(Warning(
                f"job {name!r} runs on cron {schedule.cron!r} read in UTC, while TIME_ZONE "
                f"is {site_zone!r}",
                hint=f"Pass @job(..., {_zone_option(site_zone)}) if the hours are local ones; "
                     "pass timezone='UTC' to say UTC is meant (and silence this).",
                id="django_ultjobs.W040",
            ))
    return messages


def _zone_option(site_zone: str) -> str:
    """The ``timezone=`` W040 suggests: TIME_ZONE, unless a job may not take it (Django takes
    'localtime' and the 'posix/' copies; rule 64 (bad-schedule-refused))."""
    from .core.schedules import iana_zones

    if site_zone in iana_zones():
        return f"timezone={site_zone!r}"
    return f"timezone= and the IANA name of the zone TIME_ZONE {site_zone!r} stands for"
