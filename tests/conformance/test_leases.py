"""Fleet slots, on both engines: acquire, renew fenced on holder AND expiry, release (rules 5-7),
and the claim's skipping of kinds whose slots are full (no head-of-line blocking)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_ultjobs.models import JobLease
from django_ultjobs.store import HeldLease, JobStore
from django_ultjobs.worker.fleet_slots import lease_key
from tests.doubles import FakeClock

from .helpers import claim, enqueue, new_job, row, settlement

# available_apps: between tests, flush only the queue's tables and skip re-creating every
# app's permissions and content types (the suite runs ~5x faster).
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

KEY = "job:capped"


def _rows(alias: str, key: str = KEY) -> list[tuple[int, str]]:
    return list(JobLease.objects.using(alias).filter(key=key).order_by("slot")
                .values_list("slot", "holder"))


def _expiry(alias: str, held: HeldLease) -> object:
    return JobLease.objects.using(alias).get(key=held.key, slot=held.slot).expires_at


# -- acquire --------------------------------------------------------------------------------------


def test_acquire_takes_the_lowest_free_slot_and_none_when_full(cstore: JobStore,
                                                               clock: FakeClock,
                                                               alias: str) -> None:  # rule 5
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


def test_slots_of_different_keys_are_independent(cstore: JobStore) -> None:  # rule 5
    a = cstore.acquire("job:a", 1, 30, "h")
    b = cstore.acquire("job:b", 1, 30, "h")
    assert a is not None and b is not None and (a.slot, b.slot) == (0, 0)
    assert cstore.acquire("job:a", 1, 30, "other") is None


def test_a_lapsed_slot_can_be_taken_by_another_holder(cstore: JobStore, clock: FakeClock,
                                                      alias: str) -> None:  # rule 5
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


# -- renew ----------------------------------------------------------------------------------------


def test_renew_is_true_while_held_and_extends_the_expiry(cstore: JobStore, clock: FakeClock,
                                                         alias: str) -> None:  # rules 6, 7
    held = cstore.acquire(KEY, 2, 10, "w1:1")
    assert held is not None
    for _ in range(3):
        clock.advance(9.9)
        assert cstore.renew(held, 10) is True
        assert _expiry(alias, held) == clock.now + timedelta(seconds=10)


def test_renew_is_false_when_another_holder_took_the_slot(cstore: JobStore, clock: FakeClock,
                                                          alias: str) -> None:  # rule 7
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
) -> None:  # rule 7
    held = cstore.acquire(KEY, 1, 10, "w1:1")
    assert held is not None
    clock.advance(10)  # exactly at expiry: lapsed on both engines
    assert cstore.renew(held, 10) is False
    assert _rows(alias) == [(0, "w1:1")]  # nobody took it; the row is still there
    assert _expiry(alias, held) == held.expires_at


def test_a_lapsed_slot_never_revives_itself(cstore: JobStore, clock: FakeClock,
                                            alias: str) -> None:  # rule 7
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


def test_renew_many_answers_per_slot(cstore: JobStore, clock: FakeClock) -> None:  # rule 7
    short = cstore.acquire(KEY, 3, 5, "w1:1")
    long = cstore.acquire(KEY, 3, 60, "w1:2")
    other_key = cstore.acquire("job:other", 1, 60, "w1:3")
    assert short is not None and long is not None and other_key is not None
    clock.advance(5)
    forged = HeldLease(key=KEY, slot=2, holder="w1:4", expires_at=clock.now)  # never acquired
    renewed = cstore.renew_many([short, long, other_key, forged], 60)
    assert renewed == {(KEY, 1, "w1:2"), ("job:other", 0, "w1:3")}
    assert cstore.renew_many([], 60) == set()


# -- release --------------------------------------------------------------------------------------


def test_release_frees_the_slot(cstore: JobStore, alias: str) -> None:  # rule 6
    held = cstore.acquire(KEY, 1, 30, "w1:1")
    assert held is not None
    cstore.release(held)
    assert _rows(alias) == []
    assert cstore.renew(held, 30) is False
    taken = cstore.acquire(KEY, 1, 30, "w2:2")
    assert taken is not None and taken.slot == 0


def test_release_by_a_non_holder_does_nothing(cstore: JobStore, clock: FakeClock,
                                              alias: str) -> None:  # rules 6, 7
    held = cstore.acquire(KEY, 1, 10, "w1:1")
    assert held is not None
    clock.advance(10)
    taken = cstore.acquire(KEY, 1, 10, "w2:2")
    assert taken is not None
    cstore.release(held)  # the lapsed holder's late release
    cstore.release(HeldLease(key=KEY, slot=0, holder="stranger", expires_at=clock.now))
    assert _rows(alias) == [(0, "w2:2")]
    assert cstore.renew(taken, 10) is True
    cstore.release_many([])


def test_release_many_frees_every_slot_it_holds(cstore: JobStore, alias: str) -> None:
    held = [cstore.acquire(KEY, 3, 30, f"w1:{i}") for i in range(3)]
    cstore.release_many([h for h in held[:2] if h is not None])
    assert _rows(alias) == [(2, "w1:2")]


def test_settle_refuses_two_settlements_of_one_job(cstore: JobStore, alias: str) -> None:
    # Rule 4's fence is per row: a batch holding an old and a new run of one job could apply the
    # old outcome under the new token, so the store refuses it and writes nothing.
    (job_id,) = enqueue(cstore, new_job("add"))
    (job,) = claim(cstore, limit=1)
    older = settlement(job, outcome="lease_lost")
    older.token = "00000000-0000-0000-0000-000000000000"
    with pytest.raises(ValueError, match="same job"):
        cstore.settle([older, settlement(job)], "w1")
    assert row(alias, job_id).status == "running"


# -- the claim's caps (no head-of-line blocking) -------------------------------------------------


def test_claim_skips_a_kind_whose_slots_are_all_held(cstore: JobStore) -> None:  # rule 5
    enqueue(cstore, *(new_job("capped", priority=9) for _ in range(50)))
    others = enqueue(cstore, new_job("add"), new_job("noop"))
    assert cstore.acquire(lease_key("capped"), 2, 60, "w0:1") is not None
    assert cstore.acquire(lease_key("capped"), 2, 60, "w0:2") is not None
    got = claim(cstore, limit=4, caps={"capped": 2})
    assert sorted(j.id for j in got) == others


def test_claim_takes_at_most_the_free_slots_of_a_capped_kind(cstore: JobStore) -> None:
    enqueue(cstore, *(new_job("capped") for _ in range(5)))
    assert cstore.acquire(lease_key("capped"), 3, 60, "w0:1") is not None
    got = claim(cstore, limit=10, caps={"capped": 3})
    assert [j.name for j in got] == ["capped", "capped"]
    # Uncapped, the same rows are all claimable.
    assert len(claim(cstore, "w2", limit=10)) == 3


def test_a_capped_backlog_does_not_crowd_other_kinds_out_of_a_claim(
    cstore: JobStore,
) -> None:  # rule 5
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
    assert cstore.acquire(lease_key("capped"), 3, 60, "w0:1") is not None
    got = claim(cstore, limit=6, caps={"serial": 1, "capped": 3})
    assert [j.name for j in got] == ["serial", "capped", "capped", "add", "add", "add"]
    # The limit still cuts in claim order: priority first, whatever the kind.
    assert [j.name for j in claim(cstore, "w2", limit=2, caps={"serial": 2, "capped": 9})] == [
        "serial", "serial"]


def test_uncapped_false_claims_only_the_capped_kinds(cstore: JobStore) -> None:
    # What the worker asks while only capped kinds were runnable at its last look: the scan for
    # the other kinds is left out, and nothing else about the claim changes.
    capped = enqueue(cstore, *(new_job("capped") for _ in range(3)))
    others = enqueue(cstore, new_job("add", priority=9), new_job("noop", priority=9))
    got = claim(cstore, limit=10, caps={"capped": 2}, uncapped=False)
    assert [j.id for j in got] == capped[:2]
    # Without caps there is nothing to leave out: the flag cannot starve a worker of all work.
    assert sorted(j.id for j in claim(cstore, "w2", limit=10, uncapped=False)) == sorted(
        [*others, capped[2]])


def test_a_claim_says_whether_it_left_runnable_jobs_of_other_kinds_behind(
    cstore: JobStore,
) -> None:
    # What lets a worker draining a capped kind leave the other kinds' scan out of its next
    # claims: "nothing there" is told apart from "there, but cut by the limit".
    enqueue(cstore, *(new_job("capped", priority=9) for _ in range(5)))
    got = claim(cstore, limit=3, caps={"capped": 9})
    assert len(got) == 3 and not got.others_left  # full, and the other kinds had nothing
    (add,) = enqueue(cstore, new_job("add"))
    got = claim(cstore, "w2", limit=2, caps={"capped": 9})
    assert [j.name for j in got] == ["capped", "capped"] and got.others_left  # cut, ranked lower
    got = claim(cstore, "w3", limit=5, caps={"capped": 9})
    assert [j.id for j in got if j.name == "add"] == [add] and not got.others_left  # taken
    enqueue(cstore, new_job("add"), new_job("capped"))
    # Left out of the claim, the scan reports nothing: nothing is known about the other kinds.
    got = claim(cstore, "w4", limit=1, caps={"capped": 9}, uncapped=False)
    assert [j.name for j in got] == ["capped"] and not got.others_left
    assert not claim(cstore, "w5", limit=0, caps={"capped": 9}).others_left


def test_capped_runs_the_limit_cut_are_not_other_kinds_left(cstore: JobStore) -> None:
    # Only the scan of the uncapped kinds counts: a capped kind cut by the limit is scanned on
    # every claim anyway.
    enqueue(cstore, *(new_job("capped", priority=9) for _ in range(2)))
    enqueue(cstore, *(new_job("serial", priority=1) for _ in range(3)))
    got = claim(cstore, limit=2, caps={"capped": 9, "serial": 9})
    assert [j.name for j in got] == ["capped", "capped"]
    assert got.others_left is False


def test_a_capped_kind_is_claimed_only_from_the_requested_queues(cstore: JobStore) -> None:
    (elsewhere,) = enqueue(cstore, new_job("capped", queue="other", priority=9))
    (here,) = enqueue(cstore, new_job("capped"))
    assert [j.id for j in claim(cstore, caps={"capped": 2})] == [here]
    assert [j.id for j in claim(cstore, queues=["other"], caps={"capped": 2})] == [elsewhere]


def test_lapsed_slots_count_as_free_for_the_claim(cstore: JobStore,
                                                  clock: FakeClock) -> None:  # rule 5
    (job_id,) = enqueue(cstore, new_job("capped"))
    assert cstore.acquire(lease_key("capped"), 1, 10, "dead:1") is not None
    assert claim(cstore, caps={"capped": 1}) == []
    clock.advance(10)
    assert [j.id for j in claim(cstore, caps={"capped": 1})] == [job_id]


def test_slots_a_worker_kept_count_as_free_for_it_alone(cstore: JobStore) -> None:  # rule 5
    # The worker keeps a settled run's slot for its next run of the kind: its claim may take one
    # run per kept slot beyond the fleet's free ones, and no other worker may take more.
    ids = enqueue(cstore, *(new_job("capped") for _ in range(5)))
    for holder in ("w1:1", "w1:2"):
        assert cstore.acquire(lease_key("capped"), 3, 60, holder) is not None
    assert [j.id for j in claim(cstore, "w2", limit=5, caps={"capped": 3})] == ids[:1]
    assert cstore.acquire(lease_key("capped"), 3, 60, f"w2:{ids[0]}") is not None
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


def test_a_limit_of_zero_has_no_slot_to_give(cstore: JobStore, alias: str) -> None:  # rule 5
    assert cstore.acquire(KEY, 0, 30, "w1:1") is None
    assert _rows(alias) == []


def test_acquire_many_takes_the_lowest_free_slots_in_holder_order(cstore: JobStore,
                                                                  alias: str) -> None:  # rule 5
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
    assert not cstore.renew(HeldLease(KEY, 0, "a:1", clock()), 10)   # rule 7
