"""What a job's page and the Schedules page say, in words an operator reads once, on SQLite and
PostgreSQL: a running job's outcome is its lease (not a countdown to a kill), a succeeded job's
last error is an earlier attempt's, times read one way in both tables, a run under a second in
milliseconds, the run in progress has its row, a schedule that never ticked says never; and the
charts tell retrying from suspended in both themes."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse

import django_ultjobs
from django_ultjobs.models import Job, JobAttempt, JobStep
from django_ultjobs.store import get_store
from django_ultjobs.store.schedules import ScheduleInfo, ScheduleStore
from tests.admin.conftest import client_for, make_job, page

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

WORKER_ID = "host-a:4242:abc123"
#: A moment to the second as the job's page writes it, in both tables.
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]+"


def job_page(viewer, job: Job) -> str:
    return page(client_for(viewer), reverse("admin:django_ultjobs_job_change", args=[job.id]))


def field(html: str, name: str) -> str:
    """The text of a job page's field ``name`` (its ``.readonly`` box), tags dropped."""
    match = re.search(rf'class="form-row field-{name}".*?<div class="readonly">(.*?)</div>\s*'
                      r'</div>\s*</div>', html, re.S)
    assert match, name
    return " ".join(re.sub(r"<[^>]+>", " ", match.group(1)).split())


def cells(html: str, name: str) -> list[str]:
    """The text of every attempts or steps table cell of column ``name``."""
    return [" ".join(re.sub(r"<[^>]+>", " ", c).split())
            for c in re.findall(rf'<td class="field-{name}">(.*?)</td>', html, re.S)]


def test_a_running_jobs_outcome_is_its_lease_and_its_run_in_progress_has_a_row(
        alias: str, viewer) -> None:
    db_now = get_store(alias).db_now()
    job = make_job(alias, status="running", attempt=2, max_attempts=3, worker_id=WORKER_ID,
                   claimed_at=db_now - timedelta(seconds=12),
                   visible_at=db_now + timedelta(seconds=28))
    JobAttempt.objects.using(alias).create(
        job_id=job.id, attempt=1, outcome="retrying", worker_id=WORKER_ID,
        started_at=db_now - timedelta(seconds=20), finished_at=db_now - timedelta(seconds=19.66))
    html = job_page(viewer, job)
    outcome = field(html, "outcome")
    assert re.fullmatch(r"running; its worker renews the lease at each heartbeat: expires in "
                        r"(2\d) s unless renewed", outcome), outcome
    # The attempt before, and the one running now, in the attempts table.
    assert cells(html, "attempt") == ["1", "2"]
    assert cells(html, "outcome_display") == ["retrying", "running"]
    assert cells(html, "worker_id") == [WORKER_ID, WORKER_ID]
    assert cells(html, "finished")[1] == "—"
    took = cells(html, "took")
    assert took[0] == "340 ms", took
    assert re.fullmatch(r"1\d s so far", took[1]), took


def test_a_succeeded_jobs_last_error_is_said_to_be_an_earlier_attempts(alias: str,
                                                                        viewer) -> None:
    job = make_job(alias, status="succeeded", attempt=3, max_attempts=5,
                   last_error="ConnectionError: the mail server is down", result={"ok": 1})
    text = field(job_page(viewer, job), "last_error_display")
    assert text == ("From an earlier attempt: attempt 3 succeeded. "
                    "ConnectionError: the mail server is down"), text
    failed = make_job(alias, status="failed", attempt=3, max_attempts=3,
                      last_error="ConnectionError: the mail server is down")
    assert field(job_page(viewer, failed), "last_error_display") == (
        "ConnectionError: the mail server is down")


def test_attempt_and_step_times_read_one_way(alias: str, viewer) -> None:
    db_now = get_store(alias).db_now()
    job = make_job(alias, status="succeeded", attempt=1)
    JobAttempt.objects.using(alias).create(
        job_id=job.id, attempt=1, outcome="succeeded", worker_id=WORKER_ID,
        started_at=db_now - timedelta(seconds=75), finished_at=db_now - timedelta(seconds=3))
    JobStep.objects.using(alias).create(job_id=job.id, name="charge", result=1, attempt=1,
                                        completed_at=db_now - timedelta(seconds=4))
    html = job_page(viewer, job)
    times = [*cells(html, "started"), *cells(html, "finished"), *cells(html, "created"),
             *cells(html, "completed")]
    assert len(times) == 4 and all(re.fullmatch(STAMP, t) for t in times), times
    assert cells(html, "took") == ["1 min 12 s"]


def test_a_schedule_that_never_ticked_says_never(alias: str, admin_client) -> None:
    ScheduleStore(get_store(alias)).sync([ScheduleInfo("heartbeat_tick", "every 60 s", "",
                                                       "latest")])
    html = page(admin_client, reverse("admin:django_ultjobs_jobschedule_changelist"))
    (last,) = cells(html, "last_tick_at")
    assert re.fullmatch(rf"never; scheduled since {STAMP} \(\d+ s ago\)", last), last


# -- the charts' colours (rule 81 (svg-charts))
# -----------------------------------------------------------------

STYLESHEET = Path(django_ultjobs.__file__).parent / "static" / "django_ultjobs" / "admin.css"
OUTCOMES = ("succeeded", "retrying", "failed", "cancelled", "slot_lost", "lease_lost",
            "interrupted", "suspended")


def _lab(colour: str) -> tuple[float, float, float]:
    """CIE L*a*b* of an sRGB ``#rrggbb`` (D65)."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(int(colour[i:i + 2], 16) / 255) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def _themes() -> dict[str, dict[str, str]]:
    """Each block of the stylesheet that sets the outcome colours, by its selector."""
    css = re.sub(r"/\*.*?\*/", "", STYLESHEET.read_text(), flags=re.S)
    found = {}
    for selector, body in re.findall(r"([^{}]+)\{([^{}]*--ultjobs-succeeded:[^{}]*)\}", css):
        found[" ".join(selector.split())] = dict(
            re.findall(r"--ultjobs-(\w+):\s*(#[0-9a-fA-F]{6})", body))
    return found


def test_retrying_and_suspended_are_told_apart_in_every_theme() -> None:
    themes = _themes()
    assert len(themes) == 3, themes  # light (also the default), dark by preference, dark chosen
    for selector, colours in themes.items():
        distance = math.dist(_lab(colours["retrying"]), _lab(colours["suspended"]))
        # 2.3 is a just noticeable difference; retrying and suspended were 23 apart, two yellows.
        assert distance >= 40, (selector, distance)
        closest = min(math.dist(_lab(colours[a]), _lab(colours[b]))
                      for i, a in enumerate(OUTCOMES) for b in OUTCOMES[i + 1:])
        assert closest >= 20, (selector, closest)
    # The dark preference (":root" in its media query) and the dark toggle paint the same.
    dark = [c for s, c in themes.items() if "light" not in s]
    assert len(dark) == 2 and dark[0] == dark[1], themes
