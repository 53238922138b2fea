"""Fleet slots, on both engines: acquire, renew fenced on holder AND expiry, release
(rules 5 (fleet-cap) to 7 (fenced-slot-renewal)).

How a claim honours the slots (skipping kinds whose slots are full) is in test_capped_claim.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_ultjobs.models import Slot
from django_ultjobs.store import JobStore, SlotHold
from tests.doubles import FakeClock

# available_apps: between tests, flush only the queue's tables and skip re-creating every
# app's permissions and content types (the suite runs ~5x faster).
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

KEY = "job:capped"


def _rows(alias: str, key: str = KEY) -> list[tuple[int, str]]:
    return list(Slot.objects.using(alias).filter(key=key).order_by("slot")
                .values_list("slot", "holder"))


def _expiry(alias: str, held: SlotHold) -> object:
    return Slot.objects.using(alias).get(key=held.key, slot=held.slot).expires_at


# -- acquire --------------------------------------------------------------------------------------


# rule 5 (fleet-cap)
def test_acquire_takes_the_lowest_free_slot_and_none_when_full(cstore: JobStore,
                                                               clock: FakeClock,
                                                               alias: str) -> None:
    held = [cstore.acquire(KEY, 3, 30, f"h{i}") for i in range(3)]
    assert [(h.key, h.slot, h.holder) for h in held if h] == [
        (KEY, 0, "h0"), (KEY, 1, "h1"), (KEY, 2, "h2")]
    assert all(h is not None and h.expires_at == clock.now + timedelta(seconds=30) for h in held)
    assert cstore.acquire(KEY, 3, 30, "h3") is None
    assert _rows(alias) == [(0, "h0"), (1, "h1"), (2, "h2")]
    # A freed slot in the middle is the next one taken.
    assert held[1] is not None
    cstore.release(held[1])
    again = cstore.acquire(KEY, 3, 30, "h4")
    assert again is not None and (again.slot, again.holder) == (1, "h4")


def test_slots_of_different_keys_are_independent(cstore: JobStore) -> None:  # rule 5 (fleet-cap)
    a = cstore.acquire("job:a", 1, 30, "h")
    b = cstore.acquire("job:b", 1, 30, "h")
    assert a is not None and b is not None and (a.slot, b.slot) == (0, 0)
    assert cstore.acquire("job:a", 1, 30, "other") is None


def test_a_lapsed_slot_can_be_taken_by_another_holder(cstore: JobStore, clock: FakeClock,
                                                      alias: str) -> None:  # rule 5 (fleet-cap)
    first = cstore.acquire(KEY, 1, 10, "dead-worker:1")
    assert first is not None
    clock.advance(9.999)
    assert cstore.acquire(KEY, 1, 10, "w2:2") is None
    clock.advance(0.001)  # expires_at == now: lapsed
    taken = cstore.acquire(KEY, 1, 10, "w2:2")
    assert taken is not None and (taken.slot, taken.holder) == (0, "w2:2")
    assert taken.expires_at == clock.now + timedelta(seconds=10)
    assert _rows(alias) == [(0, "w2:2")]  # taken over in place: still one row per held slot


def test_the_lowest_lapsed_slot_is_taken_before_a_higher_free_one(cstore: JobStore,
                                                                  clock: FakeClock) -> None:
    cstore.acquire(KEY, 3, 5, "h0")
    cstore.acquire(KEY, 3, 60, "h1")
    clock.advance(5)
    taken = cstore.acquire(KEY, 3, 60, "h2")
    assert taken is not None and taken.slot == 0


# rule 5 (fleet-cap)
def test_a_limit_of_zero_has_no_slot_to_give(cstore: JobStore, alias: str) -> None:
    assert cstore.acquire(KEY, 0, 30, "w1:1") is None
    assert _rows(alias) == []


# rule 5 (fleet-cap)
def test_acquire_many_takes_the_lowest_free_slots_in_holder_order(cstore: JobStore,
                                                                  alias: str) -> None:
    # One statement for all the claimed runs of a kind: lowest free slots first, one per holder,
    # never more than the limit; holders left over get none.
    assert cstore.acquire(KEY, 4, 30, "other:1") is not None          # slot 0
    got = cstore.acquire_many(KEY, 4, 30, ["w:1", "w:2", "w:3", "w:4"])
    assert {h: lease.slot for h, lease in got.items()} == {"w:1": 1, "w:2": 2, "w:3": 3}
    assert cstore.acquire_many(KEY, 4, 30, ["w:5"]) == {}
    assert cstore.acquire_many(KEY, 4, 30, []) == {}


def test_acquire_many_takes_over_lapsed_slots(cstore: JobStore, clock: FakeClock) -> None:
    assert set(cstore.acquire_many(KEY, 2, 10, ["a:1", "a:2"])) == {"a:1", "a:2"}
    clock.advance(10)
    got = cstore.acquire_many(KEY, 2, 10, ["b:1", "b:2", "b:3"])
    assert sorted(lease.slot for lease in got.values()) == [0, 1]
    assert not cstore.renew(SlotHold(KEY, 0, "a:1", clock()), 10)   # rule 7 (fenced-slot-renewal)


# -- renew ----------------------------------------------------------------------------------------


# rules 6 (slot-renewed), 7 (fenced-slot-renewal)
def test_renew_is_true_while_held_and_extends_the_expiry(cstore: JobStore, clock: FakeClock,
                                                         alias: str) -> None:
    held = cstore.acquire(KEY, 2, 10, "w1:1")
    assert held is not None
    for _ in range(3):
        clock.advance(9.9)
        assert cstore.renew(held, 10) is True
        assert _expiry(alias, held) == clock.now + timedelta(seconds=10)


# rule 7 (fenced-slot-renewal)
def test_renew_is_false_when_another_holder_took_the_slot(cstore: JobStore, clock: FakeClock,
                                                          alias: str) -> None:
    held = cstore.acquire(KEY, 1, 10, "w1:1")
    assert held is not None
    clock.advance(10)
    taken = cstore.acquire(KEY, 1, 10, "w2:2")
    assert taken is not None
    assert cstore.renew(held, 10) is False
    assert _expiry(alias, taken) == taken.expires_at  # the new holder's expiry is untouched
    assert cstore.renew(taken, 10) is True


def test_renew_is_false_when_the_slot_lapsed_even_if_nobody_took_it(
    cstore: JobStore, clock: FakeClock, alias: str
) -> None:  # rule 7 (fenced-slot-renewal)
    held = cstore.acquire(KEY, 1, 10, "w1:1")
    assert held is not None
    clock.advance(10)  # exactly at expiry: lapsed on both engines
    assert cstore.renew(held, 10) is False
    assert _rows(alias) == [(0, "w1:1")]  # nobody took it; the row is still there
    assert _expiry(alias, held) == held.expires_at


def test_a_lapsed_slot_never_revives_itself(cstore: JobStore, clock: FakeClock,
                                            alias: str) -> None:  # rule 7 (fenced-slot-renewal)
    held = cstore.acquire(KEY, 1, 10, "w1:1")
    assert held is not None
    clock.advance(10.5)
    for _ in range(3):
        assert cstore.renew(held, 3600) is False
        assert cstore.renew_many([held], 3600) == set()
        assert _expiry(alias, held) == held.expires_at
        clock.advance(1)
    # ... and is free for the next acquirer, which is not blocked by the stale holder's renewals.
    taken = cstore.acquire(KEY, 1, 10, "w2:2")
    assert taken is not None and taken.holder == "w2:2"


# rule 7 (fenced-slot-renewal)
def test_renew_many_answers_per_slot(cstore: JobStore, clock: FakeClock) -> None:
    short = cstore.acquire(KEY, 3, 5, "w1:1")
    long = cstore.acquire(KEY, 3, 60, "w1:2")
    other_key = cstore.acquire("job:other", 1, 60, "w1:3")
    assert short is not None and long is not None and other_key is not None
    clock.advance(5)
    forged = SlotHold(key=KEY, slot=2, holder="w1:4", expires_at=clock.now)  # never acquired
    renewed = cstore.renew_many([short, long, other_key, forged], 60)
    assert renewed == {(KEY, 1, "w1:2"), ("job:other", 0, "w1:3")}
    assert cstore.renew_many([], 60) == set()


# -- release --------------------------------------------------------------------------------------


def test_release_frees_the_slot(cstore: JobStore, alias: str) -> None:  # rule 6 (slot-renewed)
    held = cstore.acquire(KEY, 1, 30, "w1:1")
    assert held is not None
    cstore.release(held)
    assert _rows(alias) == []
    assert cstore.renew(held, 30) is False
    taken = cstore.acquire(KEY, 1, 30, "w2:2")
    assert taken is not None and taken.slot == 0


# rules 6 (slot-renewed), 7 (fenced-slot-renewal)
def test_release_by_a_non_holder_does_nothing(cstore: JobStore, clock: FakeClock,
                                              alias: str) -> None:
    held = cstore.acquire(KEY, 1, 10, "w1:1")
    assert held is not None
    clock.advance(10)
    taken = cstore.acquire(KEY, 1, 10, "w2:2")
    assert taken is not None
    cstore.release(held)  # the lapsed holder's late release
    cstore.release(SlotHold(key=KEY, slot=0, holder="stranger", expires_at=clock.now))
    assert _rows(alias) == [(0, "w2:2")]
    assert cstore.renew(taken, 10) is True
    cstore.release_many([])


def test_release_many_frees_every_slot_it_holds(cstore: JobStore, alias: str) -> None:
    held = [cstore.acquire(KEY, 3, 30, f"w1:{i}") for i in range(3)]
    cstore.release_many([h for h in held[:2] if h is not None])
    assert _rows(alias) == [(2, "w1:2")]
