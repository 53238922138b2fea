"""Pausing queues from the admin (rule 75 (paused-queue)): the summary shows paused queues and, to a
user who may act (Job's change permission), a pause or resume button per queue; a view-only user
gets neither the buttons nor the action."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_ultjobs.models import QueuePause
from django_ultjobs.operations import pause_queue
from tests.admin.conftest import (
    APP_INDEX,
    JOBS,
    client_for,
    make_job,
    page,
    post_action,
    post_cancel,
)
from tests.conftest import events
from tests.testapp.jobs import add

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

TOGGLE = reverse("admin:django_ultjobs_queuepause_toggle")
PAUSED = reverse("admin:django_ultjobs_queuepause_changelist")


def test_the_summary_shows_a_paused_queue_even_without_live_jobs(alias: str, viewer) -> None:
    add.using(queue="busy").enqueue(1, 2)
    pause_queue("quiet", reason="deploy", by="cli:ops", using=alias)
    html = page(client_for(viewer), APP_INDEX)
    assert 'data-queue="quiet"><span class="ultjobs-flag"' in html
    assert "Paused by cli:ops" in html and "deploy" in html
    assert 'data-queue="busy">on' in html
    assert TOGGLE not in html  # a viewer gets no buttons


def test_an_operator_pauses_and_resumes_from_the_summary(alias: str, operator) -> None:
    add.using(queue="busy").enqueue(1, 2)
    client = client_for(operator)
    assert TOGGLE in page(client, APP_INDEX)
    response = client.post(TOGGLE, {"queue": "busy", "do": "pause"}, follow=True)
    assert "Paused queue busy" in response.content.decode()
    pause = QueuePause.objects.using(alias).get(queue="busy")
    assert pause.paused_by == "admin:operator"
    assert "busy" in page(client, PAUSED)
    response = client.post(TOGGLE, {"queue": "busy", "do": "resume"}, follow=True)
    assert "Resumed queue busy" in response.content.decode()
    assert not QueuePause.objects.using(alias).exists()


def test_a_viewer_cannot_pause_and_a_get_changes_nothing(alias: str, viewer, operator) -> None:
    assert client_for(viewer).post(TOGGLE, {"queue": "q", "do": "pause"}).status_code == 403
    assert client_for(operator).get(TOGGLE, {"queue": "q", "do": "pause"}).status_code == 405
    assert not QueuePause.objects.using(alias).exists()


def test_a_bad_queue_name_is_an_error_message_not_a_crash(alias: str, operator) -> None:
    response = client_for(operator).post(TOGGLE, {"queue": "x" * 101, "do": "pause"},
                                         follow=True)
    assert "queue name is 1 to 100 characters" in response.content.decode()
    assert not QueuePause.objects.using(alias).exists()


def test_the_resume_action_resumes_the_selected_queues(alias: str, operator) -> None:
    pause_queue("a", using=alias)
    pause_queue("b", using=alias)
    response = client_for(operator).post(PAUSED, {
        "action": "resume_selected", "_selected_action": ["a"]}, follow=True)
    assert "Resumed a." in response.content.decode()
    assert list(QueuePause.objects.using(alias).values_list("queue", flat=True)) == ["b"]


def test_the_admins_cancel_and_retry_log_who_acted(alias: str, operator, caplog) -> None:
    caplog.set_level("INFO", logger="django_ultjobs")
    job = make_job(alias)
    client = client_for(operator)
    post_cancel(client, JOBS, [job.id])
    post_action(client, JOBS, "retry_selected", [job.id])
    assert events(caplog, "jobs.operations.cancelled")[0]["by"] == "admin:operator"
    assert events(caplog, "jobs.operations.retried")[0]["by"] == "admin:operator"
