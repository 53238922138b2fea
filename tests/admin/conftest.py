"""Fixtures for the admin tests: staff users with and without the permission to act, and rows.

Users and the admin log live in the ``default`` database; the jobs live in whichever database the
``alias`` fixture points ULTJOBS at, so every page is proved to read the jobs database explicitly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django.contrib.admin
import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.test.utils import override_settings
from django.urls import reverse

import django_ultjobs
from django_ultjobs.models import Job

PASSWORD = "correct horse battery staple"

# The app's admin pages, shared by the admin test modules.
JOBS = reverse("admin:django_ultjobs_job_changelist")
IN_FLIGHT = reverse("admin:django_ultjobs_inflightjob_changelist")
SLOTS = reverse("admin:django_ultjobs_heldslot_changelist")
LOST = reverse("admin:django_ultjobs_lostslotcancellation_changelist")
WORKERS = reverse("admin:django_ultjobs_worker_changelist")
APP_INDEX = reverse("admin:app_list", args=["django_ultjobs"])


def page(client: Client, url: str) -> str:
    """The page at ``url``, which must answer 200, without the ``<wbr>`` the lists put in long
    names (display.breakable): they are where a name may wrap, not part of its text."""
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode().replace("<wbr>", "")


@pytest.fixture(scope="session", autouse=True)
def static_files_for_the_live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Give the live server a STATIC_URL and a STATIC_ROOT holding the admin's CSS and ours.

    The test settings have no STATIC_URL (nothing else renders static files), and the live
    server's static handler, built once when the session-scoped ``live_server`` starts, fails
    every request without one. Session-scoped and autouse so it is in place before that start.
    """
    root = tmp_path_factory.mktemp("static")
    (root / "admin").symlink_to(Path(django.contrib.admin.__file__).parent / "static" / "admin")
    (root / "django_ultjobs").symlink_to(
        Path(django_ultjobs.__file__).parent / "static" / "django_ultjobs")
    with override_settings(STATIC_URL="/static/", STATIC_ROOT=str(root)):
        yield


def staff_user(username: str, *codenames: str) -> User:
    """Create a staff user holding ``codenames`` of the jobs app (no superuser shortcuts)."""
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="django_ultjobs", codename__in=codenames))
    return user


@pytest.fixture
def viewer() -> User:
    """A staff user who may see every jobs page and act on nothing."""
    return staff_user("viewer", "view_job", "view_jobattempt", "view_slot", "view_worker")


@pytest.fixture
def operator() -> User:
    """A staff user who may also cancel and retry (the change permission on jobs)."""
    return staff_user("operator", "view_job", "change_job", "view_slot", "view_worker")


def client_for(user: User) -> Client:
    """A test client logged in as ``user``."""
    client = Client()
    client.force_login(user)
    return client


def make_job(alias: str, **fields: Any) -> Job:
    """Write a job row directly, as a worker would have left it."""
    fields.setdefault("name", "add")
    return Job.objects.using(alias).create(**fields)


def post_action(client: Client, url: str, action: str, ids: list[int],
                **extra: str) -> Any:
    """Run a changelist action on ``ids`` the way the admin's form posts it."""
    return client.post(url, {"action": action, "index": "0",
                             "_selected_action": [str(i) for i in ids], **extra})


#: The reason ``post_cancel`` gives, as the cancel form would post it
#: (rule 59 (cancel-reason-kept)).
CANCEL_REASON = "from the admin tests"


def post_cancel(client: Client, url: str, ids: list[int], reason: str = CANCEL_REASON,
                **extra: str) -> Any:
    """Run the cancel action on ``ids`` with the reason its form asks for, as answered."""
    return post_action(client, url, "cancel_selected", ids, reason=reason,
                       _ultjobs_cancel_confirmed="1", **extra)
