"""Scenarios of bad input at the edges: enqueue arguments and options (on both engines),
Unicode digits in admin URLs, non-finite worker flags.

A bad input must get a clear error (the app's own exception type, or a refusal that names the
flag), lose nothing, and leave the caller's transaction usable, identically on both engines."""

from __future__ import annotations

import random
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from benchmarks.chaos.harness import Harness
from benchmarks.chaos.measure import ScenarioResult

ENGINES = ("default", "sqlite")


def _deep(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def enqueue_cases() -> dict[str, Callable[[], Any]]:
    """Each bad enqueue input, as a call that should be refused."""
    from benchmarks.chaos.jobs import sink

    return {
        "NUL in a keyword name": lambda: sink.enqueue(**{"a\x00b": 1}),
        "NUL in a string": lambda: sink.enqueue("a\x00b"),
        "lone surrogate": lambda: sink.enqueue("k\udfff"),
        "delay=nan": lambda: sink.using(delay=float("nan")).enqueue(),
        "delay=inf": lambda: sink.using(delay=float("inf")).enqueue(),
        "delay=1e13": lambda: sink.using(delay=1e13).enqueue(),
        # Past a float's range: once a bare OverflowError naming no option.
        "delay=10**400": lambda: sink.using(delay=10**400).enqueue(),
        "timeout=10**400": lambda: sink.using(timeout=10**400).enqueue(),
        "expires_in=10**400": lambda: sink.using(expires_in=10**400).enqueue(),
        "priority=1.7": lambda: sink.using(priority=1.7).enqueue(),  # type: ignore[arg-type]
        "priority='5'": lambda: sink.using(priority="5").enqueue(),  # type: ignore[arg-type]
        "10,000-deep nesting": lambda: sink.enqueue(_deep(10_000)),
        "10**5000": lambda: sink.enqueue(10**5000),
    }


class _Rollback(Exception):
    """Ends the caller's transaction of one case, whatever it wrote."""


def try_enqueue(alias: str, case: Callable[[], Any]) -> tuple[str, bool]:
    """Run ``case`` inside a transaction that wrote a job first; return how it was answered
    (``clear``, ``accepted`` or ``raw <Type>``) and whether the transaction, and the job it
    wrote, were still usable after."""
    from django.db import transaction
    from django.test.utils import override_settings

    from benchmarks.chaos.jobs import sink
    from django_ultjobs.exceptions import UltJobsError
    from django_ultjobs.models import Job

    answer, usable = "accepted", False
    with override_settings(ULTJOBS={"DATABASE": alias}):
        try:
            with transaction.atomic(using=alias):
                mine = sink.enqueue("the caller's own write")
                try:
                    case()
                except UltJobsError:
                    answer = "clear"
                except Exception as exc:  # what leaks is the finding
                    answer = f"raw {type(exc).__name__}"
                try:
                    usable = Job.objects.using(alias).filter(id=mine.id).exists()
                except Exception:
                    usable = False
                raise _Rollback
        except _Rollback:
            pass
        except Exception:
            usable = False
    return answer, usable


def bad_enqueue(h: Harness, rng: random.Random) -> ScenarioResult:
    """Every bad enqueue input on both engines: refused with a clear error, the caller's
    transaction intact, the same answer on PostgreSQL and SQLite."""
    h.begin("bad-enqueue")
    answers: dict[str, dict[str, str]] = {}
    broken = 0
    for name, case in enqueue_cases().items():
        for alias in ENGINES:
            answer, usable = try_enqueue(alias, case)
            answers.setdefault(name, {})[alias] = answer
            broken += not usable
    tally = Counter(a.split()[0] for per in answers.values() for a in per.values())
    differ = [n for n, per in answers.items() if len(set(per.values())) > 1]
    raw = sorted({a[4:] for per in answers.values() for a in per.values()
                  if a.startswith("raw")})
    result = ScenarioResult("bad-enqueue", jobs=len(answers) * len(ENGINES), timed=False)
    result.details["answers"] = answers
    result.notes.append(f"clear {tally['clear']}, raw {tally['raw']} ({', '.join(raw) or '-'}), "
                        f"accepted {tally['accepted']}, transaction broken {broken}, "
                        f"engines differ on {len(differ)}")
    result.fail_if(tally["raw"] > 0, f"raw errors={tally['raw']}")
    result.fail_if(tally["accepted"] > 0, f"accepted={tally['accepted']}")
    result.fail_if(broken > 0, f"transaction broken={broken}")
    result.fail_if(bool(differ), f"engines differ={len(differ)}")
    return result


#: The admin's jobs pages; each is asked for its list and its change view.
PAGES = ("job", "inflightjob", "heldslot", "lostslotcancellation", "worker")
#: Digits to ``str.isdigit()``, not numbers to ``int()``.
NOT_NUMBERS = ("²", "⑦")


def admin_urls() -> list[str]:
    urls = []
    for page in PAGES:
        base = f"/admin/django_ultjobs/{page}/"
        for value in NOT_NUMBERS:
            urls += [f"{base}{value}/change/", f"{base}?q={value}", f"{base}?p={value}",
                     f"{base}?o={value}"]
    return urls


def admin_digits(h: Harness, rng: random.Random) -> ScenarioResult:
    """Unicode digits in every jobs page's URL, as a superuser and as a staff user without
    permissions: never a 500, and the latter refused before anything is parsed."""
    from django.contrib.auth.models import User
    from django.test import Client

    from benchmarks.chaos.jobs import sink

    h.begin("admin-digits")
    h.db(lambda: sink.enqueue())
    h.db(lambda: User.objects.filter(username__startswith="chaos-").delete())
    root = h.db(lambda: User.objects.create_superuser("chaos-root", password="x"))
    staff = h.db(lambda: User.objects.create_user("chaos-staff", password="x", is_staff=True))
    errors: Counter[str] = Counter()
    past_permissions = 0
    urls = admin_urls()
    for user in (root, staff):
        client = Client(raise_request_exception=False)
        client.force_login(user)
        for url in urls:
            status = client.get(url).status_code
            if status >= 500:
                errors[user.username] += 1
            if user is staff and status not in (302, 403):
                past_permissions += 1
    result = ScenarioResult("admin-digits", jobs=2 * len(urls), timed=False)
    result.notes.append(f"HTTP 500: {sum(errors.values())} of {2 * len(urls)} "
                        f"({dict(errors) or 'none'}); staff without permissions let past: "
                        f"{past_permissions}")
    result.fail_if(sum(errors.values()) > 0, f"HTTP 500s={sum(errors.values())}")
    result.fail_if(past_permissions > 0, f"permissions not checked first={past_permissions}")
    return result


#: Flags a worker must refuse at start, naming the flag: non-finite durations, and text no
#: column keeps (too long for it, a byte that is not UTF-8: a lone surrogate once decoded, which
#: Popen writes back as that byte), which must not be retried as a database outage.
BAD_FLAGS = (("--visibility-timeout", "inf"), ("--visibility-timeout", "nan"),
             ("--poll-interval", "inf"), ("--heartbeat-interval", "nan"),
             ("--worker-id", "w" * 10_000), ("--worker-id", "\udcff"), ("--queue", "\udcff"))


def worker_flags(h: Harness, rng: random.Random) -> ScenarioResult:
    """Start a worker with each bad flag: each must exit non-zero at once, with one line
    naming the flag and no traceback."""
    h.begin("worker-flags")
    result = ScenarioResult("worker-flags", jobs=len(BAD_FLAGS), timed=False)
    started = [(flag, value, h.start_worker(flag, value)) for flag, value in BAD_FLAGS]
    deadline = time.monotonic() + 30
    refused = []
    for flag, value, worker in started:
        try:
            code = worker.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
        out = worker.log.read_text(errors="replace")
        if code not in (None, 0) and flag in out and "Traceback" not in out:
            refused.append(f"{flag} {value[:20]!r}")
        else:
            result.details[f"{flag} {value[:20]!r}"] = {"exit": code, "output": out[-300:]}
    h.end()
    result.notes.append(f"refused cleanly: {len(refused)} of {len(BAD_FLAGS)}")
    result.fail_if(len(refused) < len(BAD_FLAGS),
                   f"accepted or crashed={len(BAD_FLAGS) - len(refused)}")
    return result
