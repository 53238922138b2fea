"""A run's fleet slot passes on when its body returns, not when its settle commits
(rules 90 (slot-passes-on-return) to 92 (passed-on-window)).

A real ``Completer`` and ``FleetSlots`` against a settle that the test holds back and a
recording slot store: while a run is settling, its slot already serves the next run of its kind
(per job) or is back with the fleet (per key: released by the completer's thread before the
settle, never by the body's, which may be an event loop's), and what the settle then writes,
applied or stale, never touches a slot again. tests/acceptance/test_settling_slots.py runs the
same with real worker processes on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Sequence

from django_ultjobs.jobs.registry import get_job
from django_ultjobs.store.records import Settlement
from django_ultjobs.worker.completer import Completer
from django_ultjobs.worker.fleet_slots import FleetSlots
from django_ultjobs.worker.runs import Run, RunsInFlight
from django_ultjobs.worker.settlements import slot_unavailable_settlement
from tests.doubles import WORKER, StubSlots, claimed
from tests.doubles import MonotonicClock as Clock

CAPS = {"serial": 1}


class HeldSettles:
    """A job store whose settle waits until the test lets it go; ``stale`` makes it apply none
    (the runs' leases were lost: rule 4 (fenced-settle))."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.entered = threading.Event()
        self.stale = False
        self.written: list[int] = []

    def settle(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
        self.entered.set()
        assert self.go.wait(30)
        ids = {s.job_id for s in settlements}
        self.written += sorted(ids)
        return set() if self.stale else ids

    def refuses(self, exc: BaseException) -> bool:
        return False


def setup() -> tuple[FleetSlots, StubSlots, HeldSettles, Completer, RunsInFlight]:
    slot_store, store, runs = StubSlots(), HeldSettles(), RunsInFlight()
    slots = FleetSlots(slot_store, WORKER, ttl=30.0, clock=Clock())  # type: ignore[arg-type]
    done = Completer(store=store, runs=runs, slots=slots, worker_id=WORKER)  # type: ignore[arg-type]
    done.start()
    return slots, slot_store, store, done, runs


def serial_run(job_id: int) -> Run:
    return Run(job=claimed(job_id, "serial"), spec=get_job("serial"))


# rule 90 (slot-passes-on-return)
def test_the_next_run_takes_the_slot_while_the_settle_is_held_back() -> None:
    slots, slot_store, store, done, runs = setup()
    first = serial_run(1)
    assert slots.acquire_group([first]) == [] and len(slot_store.acquired) == 1
    assert done.submit(first, slot_unavailable_settlement(first))
    assert store.entered.wait(10)
    # The settle has not committed: the run is still in flight (its lease heartbeated) ...
    assert done.pending == 1 and runs.contains(first)
    # ... and its slot already serves the next run of its kind, with no slot statement.
    assert slots.offer(CAPS) == {"serial": 1}
    second = serial_run(2)
    assert slots.acquire_group([second]) == [] and second.slot == first.slot
    assert len(slot_store.acquired) == 1 and slot_store.released == []
    store.go.set()
    done.stop(timeout=10)
    assert store.written == [1] and not runs.contains(first)
    # The settle kept nothing and gave nothing back: the slot is the second run's alone.
    assert slots.kept == 0 and slot_store.released == []
    slot_store.renewed = {(second.slot.key, second.slot.slot, second.slot.holder)}
    slots.renew()
    assert slot_store.renew_calls == [[second.slot]] and not second.slot_lost


# rule 90 (slot-passes-on-return)
def test_a_stale_settle_neither_counts_the_slot_twice_nor_revives_it() -> None:
    slots, slot_store, store, done, _ = setup()
    store.stale = True
    first = serial_run(1)
    slots.acquire_group([first])
    assert done.submit(first, slot_unavailable_settlement(first))
    assert store.entered.wait(10) and slots.kept == 1
    store.go.set()
    done.stop(timeout=10)
    assert done.stale == 1
    # Kept once, at submit; the refused settle added no second hold and released none.
    assert slots.kept == 1 and slot_store.released == []
    slots.offer(CAPS)
    slots.release_unused()
    assert slot_store.released == [[first.slot]]


# rules 90 (slot-passes-on-return) and 51 (per-key-slot)
def test_a_per_key_slot_goes_back_to_the_fleet_at_submit() -> None:
    slots, slot_store, store, done, _ = setup()
    job = dataclasses.replace(claimed(7, "keyed_clocked"), slot_key="key:1:k:acme")
    run = Run(job=job, spec=get_job("keyed_clocked"))
    hold = slot_store.acquire_many("key:1:k:acme", 1, 30.0, [f"{WORKER}:7"])[f"{WORKER}:7"]
    slots._take_new({f"{WORKER}:7": run}, {f"{WORKER}:7": hold}, 0.0)
    assert done.submit(run, slot_unavailable_settlement(run))
    assert store.entered.wait(10)
    assert slot_store.released == [[hold]] and slots.kept == 0
    store.go.set()
    done.stop(timeout=10)
    assert slot_store.released == [[hold]]


def test_a_per_key_slot_of_an_async_body_is_released_off_its_event_loop() -> None:
    # rules 90 (slot-passes-on-return) and 85 (one-event-loop): an async run submits its outcome on
    # the worker's event loop, where Django refuses a query; the completer's thread sends the
    # release.
    slots, slot_store, store, done, _ = setup()
    released_on: list[tuple[threading.Thread, bool]] = []
    record = slot_store.release_many

    def release_many(held: Sequence[object]) -> None:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        released_on.append((threading.current_thread(), on_loop))
        record(held)  # type: ignore[arg-type]

    slot_store.release_many = release_many  # type: ignore[method-assign]
    job = dataclasses.replace(claimed(8, "keyed_clocked"), slot_key="key:1:k:acme")
    run = Run(job=job, spec=get_job("keyed_clocked"))
    hold = slot_store.acquire_many("key:1:k:acme", 1, 30.0, [f"{WORKER}:8"])[f"{WORKER}:8"]
    slots._take_new({f"{WORKER}:8": run}, {f"{WORKER}:8": hold}, 0.0)

    async def body_returned() -> bool:
        return done.submit(run, slot_unavailable_settlement(run))

    assert asyncio.run(body_returned())
    assert store.entered.wait(10)
    assert slot_store.released == [[hold]]
    assert released_on == [(done._thread, False)]
    store.go.set()
    done.stop(timeout=10)


# rule 90 (slot-passes-on-return)
def test_an_abandoned_body_keeps_its_slot_from_everyone_until_its_ttl() -> None:
    # A drain gave up on a body that ignores its cancellation: it may still be executing, so its
    # slot is neither kept nor released, and no longer renewed.
    slots, slot_store, store, done, _ = setup()
    run = serial_run(1)
    slots.acquire_group([run])
    assert done.submit(run, slot_unavailable_settlement(run), abandoned=True)
    assert store.entered.wait(10)
    assert slots.kept == 0 and slot_store.released == []
    slots.renew()
    assert slot_store.renew_calls == []
    store.go.set()
    done.stop(timeout=10)
