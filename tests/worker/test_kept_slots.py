"""A worker keeps a settled run's fleet slot for its next run of the kind (rules 5 (fleet-cap) to
9 (slot-held-while-body-runs)).

The slot passes from run to run inside the worker without a slot statement, and goes back to the
fleet when the worker's next claim brought no run to use it. These tests drive ``FleetSlots``
against a recording slot store; tests/worker/test_worker_rules.py and the process tests run the
same on real databases.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import OperationalError

from django_ultjobs.exceptions import JobSlotLostError
from django_ultjobs.jobs.registry import get_job
from django_ultjobs.store import SlotHold
from django_ultjobs.worker.fleet_slots import FleetSlots
from django_ultjobs.worker.runs import Run
from tests.doubles import WORKER, StubSlots, claimed
from tests.doubles import MonotonicClock as Clock

TTL = 30.0
CAPS = {"capped": 8, "serial": 1}


def make() -> tuple[FleetSlots, StubSlots, Clock]:
    slot_store, clock = StubSlots(), Clock()
    return FleetSlots(slot_store, WORKER, ttl=TTL, clock=clock), slot_store, clock  # type: ignore[arg-type]


def capped_run(job_id: int, name: str = "capped") -> Run:
    return Run(job=claimed(job_id, name), spec=get_job(name))


def test_a_kept_slot_passes_to_the_next_run_of_its_kind_without_a_statement() -> None:
    slots, slot_store, _ = make()
    first = capped_run(1)
    assert slots.acquire_group([first]) == []
    assert len(slot_store.acquired) == 1
    slots.keep([first])
    assert slots.offer(CAPS) == {"capped": 1}
    second, third = capped_run(2), capped_run(3)
    assert slots.acquire_group([second, third]) == []
    # The kept slot went to the first run of the group; only the other needed a new one.
    assert second.slot == first.slot
    assert [holder for *_, holder in slot_store.acquired] == [f"{WORKER}:1", f"{WORKER}:3"]
    slots.release_unused()
    assert slot_store.released == [] and slots.kept == 0


def test_an_offered_slot_no_run_took_goes_back_to_the_fleet() -> None:  # rule 6 (slot-renewed)
    slots, slot_store, _ = make()
    run = capped_run(1)
    slots.acquire_group([run])
    slots.keep([run])
    assert slots.offer(CAPS) == {"capped": 1}
    # The claim brought no run of the kind: its slot goes back at once.
    slots.release_unused()
    assert slot_store.released == [[run.slot]]
    assert slots.kept == 0


def test_a_slot_kept_after_the_offer_waits_for_the_next_claim() -> None:
    # A run settled while the claim was out: its slot was not part of that claim's count, so the
    # claim's coming back without a run of the kind says nothing about it.
    slots, slot_store, _ = make()
    run = capped_run(1)
    slots.acquire_group([run])
    assert slots.offer(CAPS) == {}
    slots.keep([run])
    slots.release_unused()
    assert slot_store.released == [] and slots.kept == 1
    assert slots.offer(CAPS) == {"capped": 1}


def test_kept_slots_of_one_kind_never_serve_another() -> None:  # rule 5 (fleet-cap)
    slots, slot_store, _ = make()
    run = capped_run(1)
    slots.acquire_group([run])
    slots.keep([run])
    slots.offer(CAPS)
    other = capped_run(2, "serial")
    assert slots.acquire_group([other]) == []
    assert other.slot is not None and other.slot.key == "job:serial"
    assert other.slot != run.slot
    slots.release_unused()
    assert slot_store.released == [[run.slot]]


# rules 5 (fleet-cap), 8 (lost-slot-cancels)
def test_lost_and_abandoned_runs_slots_are_not_kept() -> None:
    slots, slot_store, _ = make()
    lost, abandoned, fine = capped_run(1), capped_run(2), capped_run(3)
    slots.acquire_group([lost, abandoned, fine])
    lost.slot_lost = True
    abandoned.abandoned = True  # its body may still run: the slot must lapse, not pass on
    slots.keep([lost, abandoned, fine])
    assert slots.offer(CAPS) == {"capped": 1}
    slots.release_all()
    assert slot_store.released == [[fine.slot]]


# rules 5 (fleet-cap), 7 (fenced-slot-renewal)
def test_a_kept_slot_not_confirmed_lately_is_never_handed_to_a_run() -> None:
    # Renewals failing (a database blip) for half the TTL: the slot may lapse before the next
    # renewal, and another worker may take it. A new run gets a fresh slot instead, and the old
    # one is released (fenced on holder: a no-op if it lapsed and was taken).
    slots, slot_store, clock = make()
    run = capped_run(1)
    slots.acquire_group([run])
    slots.keep([run])
    clock.now += TTL / 2 + 0.1
    assert slots.offer(CAPS) == {}
    assert slot_store.released == [[run.slot]]
    nxt = capped_run(2)
    assert slots.acquire_group([nxt]) == []
    assert nxt.slot is not None and nxt.slot.holder == f"{WORKER}:2"


# rule 7 (fenced-slot-renewal)
def test_the_heartbeat_renews_kept_slots_and_drops_one_that_lapsed() -> None:
    slots, slot_store, clock = make()
    a, b = capped_run(1), capped_run(2)
    slots.acquire_group([a, b])
    slots.keep([a, b])
    assert a.slot is not None and b.slot is not None
    clock.now += TTL / 2 + 0.1
    # A renewal keeps a kept slot fresh even with no run in flight ...
    slot_store.renewed = {(a.slot.key, a.slot.slot, a.slot.holder)}
    slots.renew()
    assert slot_store.renew_calls == [[a.slot, b.slot]]
    # ... and one it answered "no" for is gone: never renewed, handed on or released again.
    assert slots.offer(CAPS) == {"capped": 1}
    slots.renew()
    assert slot_store.renew_calls[-1] == [a.slot]
    nxt = capped_run(3)
    assert slots.acquire_group([nxt]) == []
    assert nxt.slot == a.slot
    assert slot_store.released == []


# rule 9 (slot-held-while-body-runs)'s reasoning
def test_a_failed_acquire_keeps_the_kept_slots() -> None:
    slots, slot_store, _ = make()
    run = capped_run(1)
    slots.acquire_group([run])
    slots.keep([run])
    slot_store.acquire_error = OperationalError("server closed the connection unexpectedly")
    group = [capped_run(2), capped_run(3)]
    try:
        slots.acquire_group(group)
    except OperationalError:
        pass
    else:
        raise AssertionError("the acquire error must reach the worker, which hands both back")
    assert all(r.slot is None for r in group)
    assert slots.kept == 1


def test_a_slot_kept_while_the_claim_loop_cannot_claim_goes_back_after_a_while() -> None:
    # rule 6 (slot-renewed): every thread busy with long jobs, or the completer behind: no claim
    # offers the slot, so it is released once kept for longer than the loop's poll interval.
    slots, slot_store, clock = make()
    run = capped_run(1)
    slots.acquire_group([run])
    slots.keep([run])
    slots.release_idle(1.0)
    assert slot_store.released == []
    clock.now += 1.5
    slots.release_idle(1.0)
    assert slot_store.released == [[run.slot]] and slots.kept == 0


class LeaseRows:
    """Slot rows on the test's clock, fenced on holder and expiry as the stores fence them."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.rows: dict[tuple[str, int], tuple[str, float]] = {}
        self.down = False

    def acquire_many(self, key: str, limit: int, ttl: float,
                     holders: list[str]) -> dict[str, SlotHold]:
        got, waiting = {}, list(holders)
        for slot in range(limit):
            row = self.rows.get((key, slot))
            if waiting and (row is None or row[1] <= self.clock()):
                holder = waiting.pop(0)
                self.rows[(key, slot)] = (holder, self.clock() + ttl)
                got[holder] = SlotHold(key=key, slot=slot, holder=holder,
                                        expires_at=datetime.now(UTC))
        return got

    def renew_many(self, held: list[SlotHold], ttl: float) -> set[tuple[str, int, str]]:
        if self.down:
            raise OperationalError("the database system is starting up")
        renewed = set()
        for hold in held:
            row = self.rows.get((hold.key, hold.slot))
            if row and row[0] == hold.holder and row[1] > self.clock():
                self.rows[(hold.key, hold.slot)] = (hold.holder, self.clock() + ttl)
                renewed.add((hold.key, hold.slot, hold.holder))
        return renewed

    def release_many(self, held: list[SlotHold]) -> None:
        for hold in held:
            row = self.rows.get((hold.key, hold.slot))
            if row and row[0] == hold.holder:
                del self.rows[(hold.key, hold.slot)]

    def holder(self, run: Run) -> str | None:
        assert run.slot is not None
        row = self.rows.get((run.slot.key, run.slot.slot))
        return row[0] if row and row[1] > self.clock() else None


def _outage_then_kept_while_the_claim_was_out() -> tuple[FleetSlots, LeaseRows, Clock, Run, Run]:
    """Run 1's slot lapses in an outage longer than the TTL; its settle is written while a claim
    is out (so that claim's offer did not see it), and the claim's run 2 takes the lapsed slot
    afresh: the same slot number, another hold."""
    clock = Clock()
    rows = LeaseRows(clock)
    slots = FleetSlots(rows, WORKER, ttl=TTL, clock=clock)  # type: ignore[arg-type]
    first = capped_run(1)
    assert slots.acquire_group([first]) == []
    rows.down = True
    clock.now += TTL + 1
    slots.renew()
    rows.down = False
    assert slots.offer(CAPS) == {}
    slots.keep([first])
    second = capped_run(2)
    assert slots.acquire_group([second]) == []
    slots.release_unused()
    return slots, rows, clock, first, second


def test_a_lapsed_kept_slot_is_never_handed_to_a_second_run() -> None:  # rule 5 (fleet-cap)
    # Holds are told apart by the whole row: known by (key, slot) alone, the run-2 hold would
    # make the lapsed run-1 entry look fresh, and the next claim would hand it to run 3: two
    # runs on one slot row.
    slots, rows, _, first, second = _outage_then_kept_while_the_claim_was_out()
    assert second.slot is not None and first.slot is not None
    assert (second.slot.key, second.slot.slot) == (first.slot.key, first.slot.slot)
    assert slots.offer(CAPS) == {}
    third = capped_run(3)
    assert slots.acquire_group([third]) == []
    assert third.slot is not None and third.slot.slot != second.slot.slot
    assert rows.holder(second) == second.slot.holder
    assert rows.holder(third) == third.slot.holder


# rules 7 (fenced-slot-renewal), 8 (lost-slot-cancels)
def test_a_run_whose_slot_is_held_by_another_hold_is_found_lost() -> None:
    # The renewal answers hold by hold (key, slot AND holder): a run on a row that another hold
    # of the same slot owns is told "no", even when that other hold is renewed in the same call.
    slots, _, clock, first, second = _outage_then_kept_while_the_claim_was_out()
    impostor = capped_run(3)
    impostor.slot = first.slot  # what the defect handed out
    with slots._lock:
        slots._busy[(first.slot.key, first.slot.slot, first.slot.holder)] = impostor
    clock.now += 5
    slots.renew()
    assert impostor.slot_lost and isinstance(impostor.scope.reason, JobSlotLostError)
    assert not second.slot_lost


def test_kept_slots_above_a_lowered_cap_go_back() -> None:  # rule 5 (fleet-cap)
    # A cap lowered while the worker runs (a job registered again): slots at or above the new
    # cap never serve a new run, and go back to the fleet.
    slots, slot_store, _ = make()
    runs = [capped_run(i) for i in range(1, 5)]
    assert slots.acquire_group(runs) == []
    slots.keep(runs)
    assert slots.offer({"capped": 2}) == {"capped": 2}
    assert sorted(hold.slot for batch in slot_store.released for hold in batch) == [2, 3]
    new = [capped_run(i) for i in range(10, 14)]
    assert slots.acquire_group(new) == []
    assert sorted(r.slot.slot for r in new[:2] if r.slot) == [0, 1]
    # The other two took new slots from the store (its own cap check decides those).
    assert [h for *_, h in slot_store.acquired[-2:]] == [f"{WORKER}:12", f"{WORKER}:13"]


# rule 6 (slot-renewed)
def test_a_run_handed_a_slot_is_renewed_before_it_is_under_the_heartbeat() -> None:
    # The heartbeat renews the slots of the runs in its registry, which a run joins only when its
    # body starts; a kept slot (up to half a TTL old) handed over just before a heartbeat must not
    # miss that beat's renewal.
    slots, slot_store, _ = make()
    first = capped_run(1)
    slots.acquire_group([first])
    slots.keep([first])
    nxt = capped_run(2)
    assert slots.acquire_group([nxt]) == [] and nxt.slot == first.slot
    slot_store.renewed = {(first.slot.key, first.slot.slot, first.slot.holder)}
    slots.renew()
    assert slot_store.renew_calls == [[nxt.slot]]


def test_a_job_claimed_again_never_shares_its_old_slot_with_the_run_it_passed_to() -> None:
    # rules 5 (fleet-cap) and 8 (lost-slot-cancels): a kept slot keeps the holder of the run that
    # took it
    # (W:1). Here run 2 uses that slot when an outage lapses it, and job 1 is claimed again: its
    # fresh hold of the same slot has the same holder. Run 2 has lost its slot and must be
    # cancelled, not silently renewed as run 3's and kept when it settles.
    clock = Clock()
    rows = LeaseRows(clock)
    slots = FleetSlots(rows, WORKER, ttl=TTL, clock=clock)  # type: ignore[arg-type]
    first = capped_run(1, "serial")
    assert slots.acquire_group([first]) == []
    slots.keep([first])  # job 1 settled as a retry
    assert slots.offer(CAPS) == {"serial": 1}
    second = capped_run(2, "serial")
    assert slots.acquire_group([second]) == [] and second.slot == first.slot
    slots.release_unused()
    rows.down = True
    clock.now += TTL + 1
    slots.renew()
    rows.down = False
    assert slots.offer(CAPS) == {}
    again = capped_run(1, "serial")  # job 1's retry, claimed before the next heartbeat
    assert slots.acquire_group([again]) == []
    assert again.slot is not None and again.slot.holder == first.slot.holder
    assert second.slot_lost and isinstance(second.scope.reason, JobSlotLostError)
    # When run 2 settles, its slot is not kept: run 3 alone holds it.
    second.settling = True
    slots.keep([second])
    assert slots.kept == 0
    assert slots.offer(CAPS) == {}
    fourth = capped_run(4, "serial")
    assert slots.acquire_group([fourth]) == [fourth]  # the only slot is run 3's
    clock.now += 5
    slots.renew()
    assert not again.slot_lost and rows.holder(again) == again.slot.holder


def test_a_stopping_worker_keeps_no_slot() -> None:  # rule 6 (slot-renewed)
    # Draining: no run will be claimed any more, so kept slots go back at once and a run that
    # settles during the grace period gives its slot straight back.
    slots, slot_store, _ = make()
    done, running = capped_run(1), capped_run(2)
    slots.acquire_group([done, running])
    slots.keep([done])
    slots.release_all()
    assert slot_store.released == [[done.slot]]
    slots.keep([running])
    # keep sends no statement (it may run on an event loop); the completer's thread releases.
    assert slot_store.released == [[done.slot]] and slots.kept == 0
    slots.release_returned()
    assert slot_store.released == [[done.slot], [running.slot]] and slots.kept == 0
