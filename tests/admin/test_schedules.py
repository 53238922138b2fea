"""The Schedules page, and pausing and resuming schedules, on SQLite and PostgreSQL
(rule 63 (fleet-wide-pause)).

Who may see (the view permission on schedules) and act (change), what the page shows (schedule,
time zone, next tick, last tick and the outcome of its job), that pause and resume are fenced on
the state they start from and leave a LogEntry each, and that a paused schedule enqueues no tick
from any worker while a resumed one starts again from now.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse

from django_ultjobs.core.schedules import MAX_CATCH_UP, Candidates
from django_ultjobs.models import Job, JobSchedule
from django_ultjobs.operations import pause_schedules, resume_schedules
from django_ultjobs.store import get_store
from django_ultjobs.store.schedules import ScheduleInfo, ScheduleStore, TickJob
from tests.admin.conftest import APP_INDEX, client_for, page, post_action, staff_user
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

SCHEDULES = reverse("admin:django_ultjobs_jobschedule_changelist")


def _schedule(alias: str, name: str = "refresh_rates", text: str = "*/5 * * * *",
              timezone: str = "Europe/Paris") -> JobSchedule:
    ScheduleStore(get_store(alias)).sync([ScheduleInfo(name, text, timezone, "latest")])
    return JobSchedule.objects.using(alias).get(name=name)


def _offer(alias: str, job: TickJob, ticks: Sequence[datetime], by: str
           ) -> list[tuple[int, datetime]]:
    """Offer ``ticks`` as a worker whose clock is right would now: every tick up to 5 s on."""
    store = get_store(alias)
    offer = Candidates(ticks=tuple(ticks), floor=None,
                       horizon=store.db_now() + timedelta(seconds=5), keep=MAX_CATCH_UP,
                       late=None)
    return ScheduleStore(store).enqueue_ticks(job, offer, by).created


def _log(name: str) -> list[str]:
    return list(LogEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(JobSchedule), object_id=name,
        action_flag=CHANGE).order_by("id").values_list("change_message", flat=True))


def test_the_page_shows_schedule_zone_next_and_last_tick_with_its_outcome(
        alias: str, admin_client) -> None:
    schedule = _schedule(alias)
    # The schedule began ten minutes ago; its latest */5 tick has come.
    tick = schedule.last_tick.replace(second=0, microsecond=0)
    tick -= timedelta(minutes=tick.minute % 5)
    JobSchedule.objects.using(alias).filter(name="refresh_rates").update(
        last_tick=tick - timedelta(minutes=10))
    (created,) = _offer(alias, TickJob("refresh_rates", "default", 0, 3), [tick], "schedule:w1")
    _schedule(alias, "poll_inbox", "every 30 s", "")
    html = page(admin_client, SCHEDULES)
    assert "refresh_rates" in html and "*/5 * * * *" in html and "Europe/Paris" in html
    assert "every 30 s" in html
    assert f"#{created[0]} queued" in html
    assert reverse("admin:django_ultjobs_job_change", args=[created[0]]) in html
    assert "Schedules" in page(admin_client, APP_INDEX)


def test_view_only_staff_see_the_page_and_cannot_pause(alias: str) -> None:
    _schedule(alias)
    client = client_for(staff_user("watcher", "view_jobschedule"))
    html = page(client, SCHEDULES)
    assert "refresh_rates" in html and "pause_selected" not in html
    post_action(client, SCHEDULES, "pause_selected", ["refresh_rates"])
    assert not JobSchedule.objects.using(alias).get(name="refresh_rates").paused
    assert _log("refresh_rates") == []
    nobody = client_for(staff_user("nobody"))
    assert nobody.get(SCHEDULES).status_code == 403


def test_pause_and_resume_from_the_admin_are_fenced_and_logged(alias: str) -> None:
    _schedule(alias)
    client = client_for(staff_user("operator", "view_jobschedule", "change_jobschedule"))
    assert "pause_selected" in page(client, SCHEDULES)
    post_action(client, SCHEDULES, "pause_selected", ["refresh_rates"])
    assert JobSchedule.objects.using(alias).get(name="refresh_rates").paused
    # Pausing again changes nothing and logs nothing.
    post_action(client, SCHEDULES, "pause_selected", ["refresh_rates"])
    assert len(_log("refresh_rates")) == 1
    post_action(client, SCHEDULES, "resume_selected", ["refresh_rates"])
    assert not JobSchedule.objects.using(alias).get(name="refresh_rates").paused
    assert [m.split(":")[0] for m in _log("refresh_rates")] == [
        "Paused from the admin", "Resumed from the admin"]


# rule 63 (fleet-wide-pause)
def test_a_paused_schedule_gets_no_tick_and_resumes_from_now(alias: str) -> None:
    schedule = _schedule(alias, "poll_inbox", "every 1 s", "")
    store = get_store(alias)
    job = TickJob("poll_inbox", "default", 0, 3)
    begun = schedule.last_tick.replace(microsecond=0)
    assert pause_schedules(["poll_inbox"], using=alias) == ("poll_inbox",)
    assert pause_schedules(["poll_inbox"], using=alias) == ()
    paused_ticks = [begun + timedelta(seconds=i) for i in (1, 2)]
    wait_until(lambda: store.db_now() > paused_ticks[-1], message="the paused ticks to come")
    assert _offer(alias, job, paused_ticks, "w1") == []
    assert resume_schedules(["poll_inbox"], using=alias) == ("poll_inbox",)
    resumed = JobSchedule.objects.using(alias).get(name="poll_inbox")
    assert resumed.last_tick >= schedule.last_tick
    # A tick of the pause, sent late by a worker, is refused: the cursor is at the resume.
    assert _offer(alias, job, paused_ticks, "w1") == []
    later = resumed.last_tick.replace(microsecond=0) + timedelta(seconds=1)
    wait_until(lambda: store.db_now() >= later, message="the tick after the resume to come")
    assert [t for _, t in _offer(alias, job, [later], "w1")] == [later]
    assert Job.objects.using(alias).filter(name="poll_inbox").count() == 1
