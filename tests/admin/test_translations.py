"""The jobs admin speaks the site's language: its strings are marked for translation.

A French catalog of a few of them (tests/locale/fr, compiled with ``msgfmt``) is activated; each
string shows translated on its page, and would show in English the day it is no longer marked:
the app index's summary (a template), a model's verbose name, a column's title and its value, a
filter's choice, an action's description and its message (with a plural), a button and a
fieldset of a job's page.
"""

from __future__ import annotations

import gettext
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test.utils import override_settings
from django.urls import reverse
from django.utils import timezone, translation

from tests.admin.conftest import (
    APP_INDEX,
    IN_FLIGHT,
    JOBS,
    client_for,
    make_job,
    page,
    post_action,
)

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

CATALOG = Path(__file__).resolve().parent.parent / "locale" / "fr" / "LC_MESSAGES"


@pytest.fixture
def french() -> Iterator[None]:
    """The admin rendered in French, from the test catalog only (LOCALE_PATHS resets the cache)."""
    with override_settings(LOCALE_PATHS=[str(CATALOG.parent.parent)]), translation.override("fr"):
        yield


def test_the_summary_the_lists_and_their_columns_render_translated(
        alias: str, viewer: User, french: None) -> None:
    now = timezone.now()
    make_job(alias, status="running", worker_id="host:1:abc", claimed_at=now,
             visible_at=now + timedelta(minutes=5))
    make_job(alias, status="running", worker_id="host:1:abc",
             claimed_at=now - timedelta(minutes=5), visible_at=now - timedelta(minutes=1))
    client = client_for(viewer)
    index = page(client, APP_INDEX)
    assert "Exécutions en vol" in index                                   # the summary
    assert "1 expirés, en attente de nouvelle livraison" in index         # ... with a value
    assert "Places tenues" in index                                       # a verbose name
    in_flight = page(client, IN_FLIGHT)
    assert "En cours depuis" in in_flight                                 # a column's title
    assert re.search(r"expire dans \d+ (s|min)", in_flight)               # ... and its value
    assert "expiré (en attente de nouvelle livraison)" in page(client, JOBS)  # a filter's choice


def test_the_actions_their_messages_and_a_jobs_page_render_translated(
        alias: str, operator: User, french: None) -> None:
    failed = make_job(alias, status="failed", attempt=3, max_attempts=3,
                      finished_at=timezone.now())
    queued = make_job(alias)
    client = client_for(operator)
    assert "Relancer maintenant les jobs échoués ou annulés choisis" in page(client, JOBS)
    assert "Dernière exécution" in page(                                 # a fieldset's title
        client, reverse("admin:django_ultjobs_job_change", args=[failed.id]))
    response = post_action(client, JOBS, "retry_selected", [failed.id])
    assert response.status_code == 302
    assert "1 job remis en file." in page(client, response.url)          # a plural message
    assert "Annuler le job" in page(                                     # a template's button
        client, reverse("admin:django_ultjobs_job_change", args=[queued.id]))


def test_the_test_catalog_is_compiled_from_its_source() -> None:
    """The committed .mo says what the .po says (recompile with ``msgfmt`` after an edit)."""
    with (CATALOG / "django.mo").open("rb") as compiled:
        catalog = gettext.GNUTranslations(compiled)
    source = (CATALOG / "django.po").read_text(encoding="utf-8")
    pairs = re.findall(r'^msgid "(.+)"\nmsgstr "(.+)"$', source, re.M)
    assert len(pairs) >= 8
    for msgid, msgstr in pairs:
        assert catalog.gettext(msgid) == msgstr, msgid
    assert catalog.ngettext("Queued %(count)d job again.", "Queued %(count)d jobs again.", 2) \
        == "%(count)d jobs remis en file."
