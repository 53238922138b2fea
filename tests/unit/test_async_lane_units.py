"""The async lane's pieces on their own: the claim split (rule 87 (no-claim-beyond-free-places)),
the flag (rule 85 (one-event-loop)) and the cancel scope's canceller (rule 86 (async-cancel))."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.core.management import CommandError, call_command

from django_ultjobs.exceptions import CancelRequestedError, JobConfigurationError
from django_ultjobs.jobs.registry import get_job
from django_ultjobs.runtime.cancel import CancelScope
from django_ultjobs.worker.claim_lanes import claim_plans
from django_ultjobs.worker.options import MAX_ASYNC_CONCURRENCY, WorkerOptions

ASYNC = frozenset({"a1", "a2"})


def test_without_async_kinds_a_round_is_the_one_claim_of_before() -> None:
    # rule 87 (no-claim-beyond-free-places): nothing changes for a worker with no async def job.
    [plan] = claim_plans(free_sync=4, free_async=100, caps={"c": 2}, keyed=frozenset(),
                         kept={"c": 1}, async_names=frozenset())
    assert (plan.limit, plan.caps, plan.kept, plan.uncapped, plan.is_async) == (
        4, {"c": 2}, {"c": 1}, True, False)
    assert claim_plans(free_sync=0, free_async=100, caps={}, keyed=frozenset(), kept={},
                       async_names=frozenset()) == []


def test_each_lane_claims_only_its_own_kinds_at_most_its_free_places() -> None:
    # rule 87 (no-claim-beyond-free-places): the async claim takes only async kinds (no scan of the
    # others), each at most the free places, or its own fleet cap; the sync claim gives every async
    # kind a cap of 0.
    caps = {"a2": 3, "s": 2}
    plans = claim_plans(free_sync=2, free_async=50, caps=caps, keyed=frozenset({"a2"}),
                        kept={"a2": 1, "s": 1}, async_names=ASYNC)
    async_plan, sync_plan = plans
    assert async_plan.is_async and not async_plan.uncapped and async_plan.limit == 50
    assert async_plan.caps == {"a1": 50, "a2": 3}
    assert async_plan.keyed == {"a2"} and async_plan.kept == {"a2": 1}
    assert not sync_plan.is_async and sync_plan.uncapped and sync_plan.limit == 2
    assert sync_plan.caps == {"s": 2, "a1": 0, "a2": 0}
    assert sync_plan.keyed == frozenset() and sync_plan.kept == {"s": 1}


def test_a_full_lane_is_not_claimed_for() -> None:
    # rule 87 (no-claim-beyond-free-places)
    [only_async] = claim_plans(free_sync=0, free_async=5, caps={}, keyed=frozenset(), kept={},
                               async_names=ASYNC)
    assert only_async.is_async and only_async.limit == 5
    [only_sync] = claim_plans(free_sync=3, free_async=0, caps={}, keyed=frozenset(), kept={},
                              async_names=ASYNC)
    assert not only_sync.is_async and only_sync.limit == 3


@pytest.mark.parametrize("value", [0, -1, MAX_ASYNC_CONCURRENCY + 1, 2.5, True])
def test_a_bad_async_concurrency_is_refused(value: object) -> None:
    # rule 85 (one-event-loop), and rule 18 (start-mistake-named): one line naming the flag
    with pytest.raises(JobConfigurationError, match="--async-concurrency must be a whole number"):
        WorkerOptions(async_concurrency=value)  # type: ignore[arg-type]
    assert WorkerOptions(async_concurrency=MAX_ASYNC_CONCURRENCY).async_concurrency == \
        MAX_ASYNC_CONCURRENCY


def test_the_flag_is_refused_in_one_line_before_anything_starts() -> None:
    with pytest.raises(CommandError, match=r"^--async-concurrency must be a whole number from 1 "
                                           rf"to {MAX_ASYNC_CONCURRENCY}, not 0$"):
        call_command("runjobworker", "--async-concurrency", "0")


def test_async_bodies_are_told_apart_from_sync_ones() -> None:
    # rule 85 (one-event-loop): what goes to the async lane.
    from tests.testapp.jobs import async_sleep, sync_sleep

    assert get_job("async_sleep") is async_sleep and async_sleep.is_coroutine
    assert not sync_sleep.is_coroutine


def test_a_canceller_is_called_once_from_the_cancelling_thread() -> None:
    # rule 86 (async-cancel): the async lane's hook into the one cancel signal.
    scope = CancelScope()
    calls: list[str] = []
    scope.set_canceller(lambda: calls.append(threading.current_thread().name))
    thread = threading.Thread(target=scope.cancel, args=(CancelRequestedError("stop"),),
                              name="canceller")
    thread.start()
    thread.join()
    assert not scope.cancel(CancelRequestedError("again"))
    assert calls == ["canceller"]
    # Set after the signal fired: called at once. Cleared: never again.
    late = CancelScope()
    late.cancel(CancelRequestedError("early"))
    late.set_canceller(lambda: calls.append("late"))
    assert calls[-1] == "late"
    late.set_canceller(None)


def test_a_stuck_await_is_cancelled_from_another_thread() -> None:
    # rule 86 (async-cancel): the body's task is cancelled through loop.call_soon_threadsafe.
    from django_ultjobs.worker.async_executor import _cancellable

    class FakeRun:
        scope = CancelScope()

    run = FakeRun()

    async def main() -> str:
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, lambda: threading.Thread(
            target=run.scope.cancel, args=(CancelRequestedError("stop"),)).start())
        try:
            await _cancellable(run, asyncio.sleep(3600))  # type: ignore[arg-type]
        except asyncio.CancelledError:
            return "cancelled"
        return "slept"

    assert asyncio.run(asyncio.wait_for(main(), 5)) == "cancelled"
    assert run.scope._canceller is None  # nothing held past the run (rule 13 (nothing-leaks))
