"""A worker keeps a settled run's fleet slot for its next run of the kind (rules 5-9).

The slot passes from run to run inside the worker without a lease statement, and goes back to the
fleet when the worker's next claim brought no run to use it. These tests drive ``FleetSlots``
against a recording lease store; tests/worker/test_worker_rules.py and the process tests run the
same on real databases.
"""

from __future__ import annotations

from django.db import OperationalError

from django_ultjobs.registry import get_job
from django_ultjobs.worker.fleet_slots import FleetSlots
from django_ultjobs.worker.runs import Run

from .test_ticker_rules import WORKER, StubLeases, claimed

TTL = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make() -> tuple[FleetSlots, StubLeases, Clock]:
    leases, clock = StubLeases(), Clock()
    return FleetSlots(leases, WORKER, ttl=TTL, clock=clock), leases, clock  # type: ignore[arg-type]


def capped_run(job_id: int, name: str = "capped") -> Run:
    return Run(job=claimed(job_id, name), spec=get_job(name))


def test_a_kept_slot_passes_to_the_next_run_of_its_kind_without_a_statement() -> None:
    slots, leases, _ = make()
    first = capped_run(1)
    assert slots.acquire_group([first]) == []
    assert len(leases.acquired) == 1
    slots.keep([first])
    assert slots.offer() == {"capped": 1}
    second, third = capped_run(2), capped_run(3)
    assert slots.acquire_group([second, third]) == []
    # The kept slot went to the first run of the group; only the other needed a new one.
    assert second.lease == first.lease
    assert [holder for *_, holder in leases.acquired] == [f"{WORKER}:1", f"{WORKER}:3"]
    slots.give_back_unused()
    assert leases.released == [] and slots.kept == 0


def test_an_offered_slot_no_run_took_goes_back_to_the_fleet() -> None:  # rule 6
    slots, leases, _ = make()
    run = capped_run(1)
    slots.acquire_group([run])
    slots.keep([run])
    assert slots.offer() == {"capped": 1}
    # The claim brought no run of the kind: its slot goes back at once.
    slots.give_back_unused()
    assert leases.released == [[run.lease]]
    assert slots.kept == 0


def test_a_slot_kept_after_the_offer_waits_for_the_next_claim() -> None:
    # A run settled while the claim was out: its slot was not part of that claim's count, so the
    # claim's coming back without a run of the kind says nothing about it.
    slots, leases, _ = make()
    run = capped_run(1)
    slots.acquire_group([run])
    assert slots.offer() == {}
    slots.keep([run])
    slots.give_back_unused()
    assert leases.released == [] and slots.kept == 1
    assert slots.offer() == {"capped": 1}


def test_kept_slots_of_one_kind_never_serve_another() -> None:  # rule 5
    slots, leases, _ = make()
    run = capped_run(1)
    slots.acquire_group([run])
    slots.keep([run])
    slots.offer()
    other = capped_run(2, "serial")
    assert slots.acquire_group([other]) == []
    assert other.lease is not None and other.lease.key == "job:serial"
    assert other.lease != run.lease
    slots.give_back_unused()
    assert leases.released == [[run.lease]]


def test_lost_and_abandoned_runs_slots_are_not_kept() -> None:  # rules 5, 8
    slots, leases, _ = make()
    lost, abandoned, fine = capped_run(1), capped_run(2), capped_run(3)
    slots.acquire_group([lost, abandoned, fine])
    lost.slot_lost = True
    abandoned.abandoned = True  # its body may still run: the slot must lapse, not pass on
    slots.keep([lost, abandoned, fine])
    assert slots.offer() == {"capped": 1}
    slots.give_back_all()
    assert leases.released == [[fine.lease]]


def test_a_kept_slot_not_confirmed_lately_is_never_handed_to_a_run() -> None:  # rules 5, 7
    # Renewals failing (a database blip) for half the TTL: the slot may lapse before the next
    # renewal, and another worker may take it. A new run gets a fresh slot instead, and the old
    # one is given back (fenced on holder: a no-op if it lapsed and was taken).
    slots, leases, clock = make()
    run = capped_run(1)
    slots.acquire_group([run])
    slots.keep([run])
    clock.now += TTL / 2 + 0.1
    assert slots.offer() == {}
    assert leases.released == [[run.lease]]
    nxt = capped_run(2)
    assert slots.acquire_group([nxt]) == []
    assert nxt.lease is not None and nxt.lease.holder == f"{WORKER}:2"


def test_the_ticker_renews_kept_slots_and_drops_one_that_lapsed() -> None:  # rule 7
    slots, leases, clock = make()
    a, b = capped_run(1), capped_run(2)
    slots.acquire_group([a, b])
    slots.keep([a, b])
    assert a.lease is not None and b.lease is not None
    clock.now += TTL / 2 + 0.1
    # A renewal keeps a kept slot fresh even with no run in flight ...
    leases.renewed = {(a.lease.key, a.lease.slot)}
    slots.renew([])
    assert leases.renew_calls == [[a.lease, b.lease]]
    # ... and one it answered "no" for is gone: never renewed, handed on or given back again.
    assert slots.offer() == {"capped": 1}
    slots.renew([])
    assert leases.renew_calls[-1] == [a.lease]
    nxt = capped_run(3)
    assert slots.acquire_group([nxt]) == []
    assert nxt.lease == a.lease
    assert leases.released == []


def test_a_failed_acquire_keeps_the_kept_slots() -> None:  # rule 9's reasoning
    slots, leases, _ = make()
    run = capped_run(1)
    slots.acquire_group([run])
    slots.keep([run])
    leases.acquire_error = OperationalError("server closed the connection unexpectedly")
    group = [capped_run(2), capped_run(3)]
    try:
        slots.acquire_group(group)
    except OperationalError:
        pass
    else:
        raise AssertionError("the acquire error must reach the worker, which hands both back")
    assert all(r.lease is None for r in group)
    assert slots.kept == 1
