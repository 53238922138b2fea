"""A claim under per-key caps, on both engines (rule 50 (per-key-cap)): a key whose slots are all
held is skipped and never holds back other keys or other jobs, a key gets at most its free slots,
each run says its slot key, and one statement takes the slots of every key of a claim."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from django_ultjobs.core.slot_keys import keyed_slot_key, slot_key_for
from django_ultjobs.store import JobStore

from .helpers import enqueue, new_job

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


def keyed(key: str, name: str = "export", priority: int = 0):
    return replace(new_job(name, priority=priority), concurrency_key=keyed_slot_key(name, key))


def claim_keyed(store: JobStore, worker: str = "w1", *, limit: int = 10, cap: int = 1,
                caps: dict[str, int] | None = None):
    return store.claim(worker_id=worker, queues=["default"], limit=limit,
                       visibility_timeout=30.0, caps={"export": cap, **(caps or {})},
                       keyed=["export"])


def test_a_full_key_holds_back_no_other_key_nor_other_jobs(cstore: JobStore) -> None:  # 50
    # Two thousand runs of one key queued ahead of everything: once its one slot is held, the
    # next claim takes the other keys' runs and the other jobs at once.
    enqueue(cstore, *(keyed("a", priority=9) for _ in range(2000)))
    others = enqueue(cstore, keyed("b"), keyed("c"), new_job("add"))
    assert cstore.acquire(keyed_slot_key("export", "a"), 1, 60, "w0:1") is not None
    got = claim_keyed(cstore, limit=10)
    assert sorted(j.id for j in got) == others


def test_a_key_gets_at_most_its_free_slots_and_each_run_says_its_key(cstore: JobStore) -> None:
    ids = enqueue(cstore, *(keyed("a") for _ in range(5)), *(keyed("b") for _ in range(5)))
    assert cstore.acquire(keyed_slot_key("export", "a"), 3, 60, "w0:1") is not None
    got = claim_keyed(cstore, limit=10, cap=3)
    by_key: dict[str | None, list[int]] = {}
    for job in got:
        by_key.setdefault(job.slot_key, []).append(job.id)
    assert by_key == {keyed_slot_key("export", "a"): ids[:2],
                      keyed_slot_key("export", "b"): ids[5:8]}


def test_a_row_without_a_key_takes_the_jobs_own_slots(cstore: JobStore) -> None:
    # Enqueued before the job had concurrency_key: capped per job, never uncapped.
    first, _second = enqueue(cstore, new_job("export"), new_job("export"))
    got = claim_keyed(cstore)
    assert [(j.id, j.slot_key) for j in got] == [(first, slot_key_for("export"))]
    assert cstore.acquire(slot_key_for("export"), 1, 60, f"w1:{first}") is not None
    assert list(claim_keyed(cstore, "w2")) == []


def test_per_job_and_per_key_caps_in_one_claim(cstore: JobStore) -> None:
    enqueue(cstore, *(new_job("capped", priority=5) for _ in range(4)))
    enqueue(cstore, *(keyed(k) for k in "aabbc"))
    got = claim_keyed(cstore, limit=10, caps={"capped": 2})
    assert sorted(j.name for j in got) == ["capped", "capped", "export", "export", "export"]
    assert all(j.slot_key is None for j in got if j.name == "capped")
    assert sorted(j.slot_key for j in got if j.name == "export") == [
        keyed_slot_key("export", k) for k in "abc"]


# rule 50 (per-key-cap)
def test_one_statement_takes_the_slots_of_every_key(cstore: JobStore) -> None:
    a, b = keyed_slot_key("export", "a"), keyed_slot_key("export", "b")
    held = cstore.acquire_keys([(a, 2, "w1:1"), (b, 1, "w1:2"), (a, 2, "w1:3"),
                                (b, 1, "w1:4")], 60)
    assert sorted((h.key, h.slot, h.holder) for h in held.values()) == [
        (a, 0, "w1:1"), (a, 1, "w1:3"), (b, 0, "w1:2")]
    # A full key grants nothing more; its slots renew and release like any other
    # (rule 51 (per-key-slot)).
    assert cstore.acquire_keys([(a, 2, "w2:5")], 60) == {}
    assert len(cstore.renew_many(list(held.values()), 60)) == 3
    cstore.release_many([held["w1:1"]])
    assert set(cstore.acquire_keys([(a, 2, "w2:5")], 60)) == {"w2:5"}


def test_a_claim_of_many_keys_and_their_slots_are_one_statement_each(
        cstore: JobStore, alias: str) -> None:  # rule 50 (per-key-cap)
    if alias != "postgres":
        pytest.skip("SQLite's claim is a write transaction of several statements by design")
    enqueue(cstore, *(keyed(str(k)) for k in range(40)))
    with CaptureQueriesContext(connections[alias]) as claimed:
        got = claim_keyed(cstore, limit=32)
    assert len(got) == 32 and len(claimed.captured_queries) == 1
    with CaptureQueriesContext(connections[alias]) as acquired:
        held = cstore.acquire_keys([(j.slot_key, 1, f"w1:{j.id}") for j in got], 60)
    assert len(held) == 32 and len(acquired.captured_queries) == 1
