"""The admin's runs settling (rule 91 (settling-shown)), both engines: a running job of a capped
name beyond the live slots its worker holds of that key has had its body return and its settle not
written; the summary and the held-slots page show such runs as settling and count them against no
cap."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from django_ultjobs.admin.settling import settling_by_key
from django_ultjobs.admin.summary import jobs_summary
from django_ultjobs.core.slot_keys import keyed_slot_key, slot_key_for
from django_ultjobs.models import Slot
from tests.admin.conftest import APP_INDEX, SLOTS, client_for, make_job, page

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

CAPPED = slot_key_for("capped_clocked")  # concurrency=2
ACME = keyed_slot_key("keyed_clocked", "acme")  # concurrency=1 per customer


def running(alias: str, worker: str, name: str = "capped_clocked", key: str = "") -> int:
    return make_job(alias, name=name, status="running", worker_id=worker, concurrency_key=key,
                    visible_at=timezone.now() + timedelta(seconds=30)).id


def slot(alias: str, key: str, n: int, holder: str, *, live: bool = True) -> None:
    ahead = timedelta(seconds=30 if live else -30)
    Slot.objects.using(alias).create(key=key, slot=n, holder=holder,
                                     expires_at=timezone.now() + ahead)


def test_running_jobs_beyond_their_workers_slots_are_settling(alias: str, viewer) -> None:
    # w1: three running, two live slots (one kept from a run that settled): one settling.
    first = running(alias, "w1")
    running(alias, "w1")
    running(alias, "w1")
    slot(alias, CAPPED, 0, f"w1:{first}")
    slot(alias, CAPPED, 1, "w1:999")
    # w2: one running, its slot lapsed (no longer a hold): settling, never counted.
    w2 = running(alias, "w2")
    slot(alias, CAPPED, 2, f"w2:{w2}", live=False)
    # Per key: acme's one slot held by w1's executing run; w2's acme run is settling.
    acme = running(alias, "w1", "keyed_clocked", ACME)
    slot(alias, ACME, 0, f"w1:{acme}")
    running(alias, "w2", "keyed_clocked", ACME)
    # A queued capped job waits: its two slots are held.
    make_job(alias, name="capped_clocked", visible_at=timezone.now() - timedelta(minutes=2))

    assert settling_by_key(alias) == {CAPPED: 2, ACME: 1}
    summary = jobs_summary(alias)
    assert (summary.slots_held, summary.slots_settling) == (3, 3)
    wait = summary.oldest_runnable.slot_wait if summary.oldest_runnable else None
    assert wait is not None and (wait.held, wait.cap, wait.settling) == (2, 2, 2)

    client = client_for(viewer)
    html = page(client, APP_INDEX)
    assert re.search(r'id="ultjobs-slots"><a [^>]+>3</a>', html)
    assert "3 runs settling (body returned, settle not written: hold no slot)" in html
    assert "2 of 2 held" in html and "2 more runs settling, not counted against the cap" in html
    listing = page(client, SLOTS)
    note = re.search(r'id="ultjobs-settling">(.*?)</p>', listing, re.S)
    assert note is not None and "not counted against the cap" in note[1]
    assert f"{CAPPED}: 2" in note[1] and f"{ACME}: 1" in note[1]


def test_no_settling_run_no_line(alias: str, viewer) -> None:
    job = running(alias, "w1")
    slot(alias, CAPPED, 0, f"w1:{job}")
    running(alias, "w1", name="add")  # not capped: never settling in this sense
    assert settling_by_key(alias) == {} and jobs_summary(alias).slots_settling == 0
    client = client_for(viewer)
    assert 'id="ultjobs-settling"' not in page(client, APP_INDEX)
    assert 'id="ultjobs-settling"' not in page(client, SLOTS)
