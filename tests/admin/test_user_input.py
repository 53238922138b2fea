"""What a URL or a form can put into the admin never answers 500, and permissions come first.

``str.isdigit()`` is true for ``"²"`` and other Unicode digits that ``int()`` refuses, so every
place the admin reads a number from the request is tried with them, on both engines: a user
without permissions is refused (403, or the login page) before anything is parsed, and a
superuser gets an empty list, a redirect or a 404, never a server error.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from django_ultjobs.admin.display import split_holder
from django_ultjobs.admin.job_actions import FROM_DETAIL
from tests.admin.conftest import (
    IN_FLIGHT,
    JOBS,
    PASSWORD,
    client_for,
    make_job,
    post_cancel,
    staff_user,
)

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

#: Each is "a digit" to str.isdigit() and not a number to int(); the last one is too big for a
#: bigint id.
NOT_NUMBERS = ("²", "1²", "⑦", "99999999999999999999999")


#: Every jobs page's change view, under its URL name.
PAGES = ("job", "inflightjob", "heldslot", "lostslotcancellation", "worker")


def every_change_view(object_id: str) -> list[str]:
    return [reverse(f"admin:django_ultjobs_{page}_changelist") + f"{object_id}/change/"
            for page in PAGES]


@pytest.fixture
def nobody() -> User:
    """A staff user with no permission on the jobs app."""
    return staff_user("nobody")


@pytest.fixture
def superuser() -> User:
    return User.objects.create_superuser("root", password=PASSWORD)


@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_a_user_without_permissions_is_refused_before_anything_is_parsed(
        alias: str, nobody: User, value: str) -> None:
    client = client_for(nobody)
    for url in (*every_change_view(value), f"{JOBS}?q={value}", f"{IN_FLIGHT}?q={value}"):
        response = client.get(url)
        assert response.status_code in (302, 403), (url, response.status_code)
        if response.status_code == 302:
            # Refused is refused: not sent on to the job's page as if the id had been read.
            assert "/login/" in response["Location"] or response["Location"].rstrip(
                "/").endswith("/admin"), (url, response["Location"])


@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_a_superuser_gets_an_empty_list_or_no_such_job(
        alias: str, superuser: User, value: str) -> None:
    make_job(alias)
    client = client_for(superuser)
    for search in (value, f"#{value}"):
        response = client.get(JOBS, {"q": search})
        assert response.status_code == 200, (search, response.status_code)
        assert 'class="field-job_id"' not in response.content.decode()
    for page in PAGES:
        # Pagination, ordering and search on every list.
        changelist = reverse(f"admin:django_ultjobs_{page}_changelist")
        for param in ("p", "o", "q"):
            response = client.get(changelist, {param: value})
            assert response.status_code in (200, 302, 404), (page, param, response.status_code)
    for url in every_change_view(value):
        response = client.get(url)
        assert response.status_code in (302, 404), (url, response.status_code)
        if response.status_code == 302:
            # Never to the job page of an id nobody asked for.
            assert "/change/" not in response["Location"], (url, response["Location"])


@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_an_action_posted_from_a_job_page_with_a_bad_id(
        alias: str, superuser: User, value: str) -> None:
    make_job(alias)
    response = post_cancel(client_for(superuser), JOBS, [],
                           _selected_action=value, **{FROM_DETAIL: "1"})
    assert response.status_code in (200, 302, 404), response.status_code
    if response.status_code == 302:
        assert "/change/" not in response["Location"], response["Location"]


def test_a_lease_holder_with_unicode_digits_has_no_job() -> None:
    assert split_holder("host:1:abcdef:12") == ("host:1:abcdef", 12)
    assert split_holder("host:1:abcdef:²") == ("host:1:abcdef:²", None)
    assert split_holder("host:1:abcdef:1²") == ("host:1:abcdef:1²", None)
