"""A claim under fleet caps, on both engines: a kind whose slots are all held is skipped, a
capped kind gets at most its free slots, and a capped backlog never blocks the kinds queued
behind it (rule 5 (fleet-cap), no head-of-line blocking)."""

from __future__ import annotations

import pytest

from django_ultjobs.core.slot_keys import slot_key_for
from django_ultjobs.operations import pause_queue
from django_ultjobs.store import JobStore
from tests.doubles import FakeClock

from .helpers import claim, enqueue, new_job

# available_apps: between tests, flush only the queue's tables and skip re-creating every
# app's permissions and content types (the suite runs ~5x faster).
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


# rule 5 (fleet-cap)
def test_claim_skips_a_kind_whose_slots_are_all_held(cstore: JobStore) -> None:
    enqueue(cstore, *(new_job("capped", priority=9) for _ in range(50)))
    others = enqueue(cstore, new_job("add"), new_job("noop"))
    assert cstore.acquire(slot_key_for("capped"), 2, 60, "w0:1") is not None
    assert cstore.acquire(slot_key_for("capped"), 2, 60, "w0:2") is not None
    got = claim(cstore, limit=4, caps={"capped": 2})
    assert sorted(j.id for j in got) == others


def test_claim_takes_at_most_the_free_slots_of_a_capped_kind(cstore: JobStore) -> None:
    enqueue(cstore, *(new_job("capped") for _ in range(5)))
    assert cstore.acquire(slot_key_for("capped"), 3, 60, "w0:1") is not None
    got = claim(cstore, limit=10, caps={"capped": 3})
    assert [j.name for j in got] == ["capped", "capped"]
    # Uncapped, the same rows are all claimable.
    assert len(claim(cstore, "w2", limit=10)) == 3


def test_a_capped_backlog_does_not_crowd_other_kinds_out_of_a_claim(
    cstore: JobStore,
) -> None:  # rule 5 (fleet-cap)
    # A thousand runs of a concurrency=1 job queued ahead of everything else: one claim takes the
    # one it may run and still fills the rest of its limit with the jobs behind them.
    enqueue(cstore, *(new_job("serial", priority=9) for _ in range(1000)))
    others = enqueue(cstore, *(new_job("add") for _ in range(3)))
    got = claim(cstore, limit=4, caps={"serial": 1})
    assert sorted(j.name for j in got) == ["add", "add", "add", "serial"]
    assert sorted(j.id for j in got if j.name == "add") == others


def test_each_capped_kind_gets_its_free_slots_in_claim_order(cstore: JobStore) -> None:
    enqueue(cstore, *(new_job("serial", priority=9) for _ in range(20)))
    enqueue(cstore, *(new_job("capped", priority=5) for _ in range(20)))
    enqueue(cstore, *(new_job("add", priority=1) for _ in range(20)))
    assert cstore.acquire(slot_key_for("capped"), 3, 60, "w0:1") is not None
    got = claim(cstore, limit=6, caps={"serial": 1, "capped": 3})
    assert [j.name for j in got] == ["serial", "capped", "capped", "add", "add", "add"]
    # The limit still cuts in claim order: priority first, whatever the kind.
    assert [j.name for j in claim(cstore, "w2", limit=2, caps={"serial": 2, "capped": 9})] == [
        "serial", "serial"]


def test_uncapped_false_claims_only_the_capped_kinds(cstore: JobStore) -> None:
    # What the async lane asks (its own kinds, as caps): the scan for the other kinds is left
    # out, and nothing else about the claim changes.
    capped = enqueue(cstore, *(new_job("capped") for _ in range(3)))
    others = enqueue(cstore, new_job("add", priority=9), new_job("noop", priority=9))
    got = claim(cstore, limit=10, caps={"capped": 2}, uncapped=False)
    assert [j.id for j in got] == capped[:2]
    # Without caps there is nothing to leave out: the flag cannot starve a worker of all work.
    assert sorted(j.id for j in claim(cstore, "w2", limit=10, uncapped=False)) == sorted(
        [*others, capped[2]])


def test_a_capped_kind_is_claimed_only_from_the_requested_queues(cstore: JobStore) -> None:
    (elsewhere,) = enqueue(cstore, new_job("capped", queue="other", priority=9))
    (here,) = enqueue(cstore, new_job("capped"))
    assert [j.id for j in claim(cstore, caps={"capped": 2})] == [here]
    assert [j.id for j in claim(cstore, queues=["other"], caps={"capped": 2})] == [elsewhere]


def test_lapsed_slots_count_as_free_for_the_claim(cstore: JobStore,
                                                  clock: FakeClock) -> None:  # rule 5 (fleet-cap)
    (job_id,) = enqueue(cstore, new_job("capped"))
    assert cstore.acquire(slot_key_for("capped"), 1, 10, "dead:1") is not None
    assert claim(cstore, caps={"capped": 1}) == []
    clock.advance(10)
    assert [j.id for j in claim(cstore, caps={"capped": 1})] == [job_id]


# rule 5 (fleet-cap)
def test_slots_a_worker_kept_count_as_free_for_it_alone(cstore: JobStore) -> None:
    # The worker keeps a settled run's slot for its next run of the kind: its claim may take one
    # run per kept slot beyond the fleet's free ones, and no other worker may take more.
    ids = enqueue(cstore, *(new_job("capped") for _ in range(5)))
    for holder in ("w1:1", "w1:2"):
        assert cstore.acquire(slot_key_for("capped"), 3, 60, holder) is not None
    assert [j.id for j in claim(cstore, "w2", limit=5, caps={"capped": 3})] == ids[:1]
    assert cstore.acquire(slot_key_for("capped"), 3, 60, f"w2:{ids[0]}") is not None
    # All three slots held now; w1 kept two of them.
    assert claim(cstore, "w2", limit=5, caps={"capped": 3}) == []
    got = claim(cstore, "w1", limit=5, caps={"capped": 3}, kept={"capped": 2})
    assert [j.id for j in got] == ids[1:3]
    # What it kept for one kind gives nothing of another kind.
    assert claim(cstore, "w1", limit=5, caps={"capped": 3, "serial": 1},
                 kept={"serial": 1}) == []


def test_caps_of_kinds_with_nothing_queued_change_nothing(cstore: JobStore) -> None:
    ids = enqueue(cstore, new_job("add"), new_job("add"))
    got = claim(cstore, caps={"capped": 2, "serial": 1})
    assert sorted(j.id for j in got) == ids


def test_the_capped_kinds_alone_are_claimed_as_the_full_claim_would(cstore: JobStore) -> None:
    # With the other kinds' scan left out and no kind capped per key, the claim is a statement
    # of its own: the same rows in the same order, each kind held to
    # its free slots (kept ones counted), the whole to the limit, paused queues left alone.
    enqueue(cstore, *(new_job("capped", priority=p) for p in (1, 5, 3)))
    enqueue(cstore, *(new_job("serial", priority=p) for p in (4, 2)))
    (paused,) = enqueue(cstore, new_job("capped", queue="paused", priority=9))
    enqueue(cstore, new_job("add", priority=9))
    pause_queue("paused", using=cstore.alias)
    assert cstore.acquire(slot_key_for("capped"), 2, 60, "w1:0") is not None
    # "capped": 2 slots, one held and kept by w1 itself, so both free to it; "serial": 1.
    got = claim(cstore, queues=["default", "paused"], limit=3,
                caps={"capped": 2, "serial": 1}, kept={"capped": 1}, uncapped=False)
    assert [(j.name, j.priority) for j in got] == [("capped", 5), ("serial", 4), ("capped", 3)]
    assert paused not in [j.id for j in got]
    got = claim(cstore, "w2", limit=5, caps={"capped": 9, "serial": 9}, uncapped=False)
    assert [(j.name, j.priority) for j in got] == [("serial", 2), ("capped", 1)]
