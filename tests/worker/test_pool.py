"""The executor pool: never a run stuck behind a slow one, and exactly ``size`` runs at once.

These tests hold what a fixed pool must never cost: a run handed over together with a blocking
one still starts (no head-of-line blocking inside a claim), a claim of N blocking runs runs N at
once, and queued runs count as busy so the claim loop never claims more than there are threads.
"""

from __future__ import annotations

import threading
import time

from django_ultjobs.worker.pool import ExecutorPool


class Blocking:
    """A stand-in run whose body waits for ``release``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = threading.Event()
        self.release = threading.Event()


def blocking_pool(size: int) -> ExecutorPool:
    def handler(run: Blocking) -> None:
        run.started.set()
        assert run.release.wait(10), f"{run.name} was never released"

    pool = ExecutorPool(size, handler)  # type: ignore[arg-type]
    pool.start()
    return pool


def test_run_behind_a_blocking_run_of_the_same_claim_still_starts() -> None:
    pool = blocking_pool(4)
    slow, behind = Blocking("slow"), Blocking("behind")
    try:
        pool.submit_many([slow, behind])
        assert slow.started.wait(5)
        # The thread that took "slow" is stuck in it: "behind" needs a thread of its own.
        assert behind.started.wait(5), "a queued run waited behind a blocking body"
        assert not slow.release.is_set()
    finally:
        slow.release.set()
        behind.release.set()
        pool.stop(timeout=5)


def test_a_claim_of_blocking_runs_runs_them_all_at_once() -> None:
    size = 8
    barrier = threading.Barrier(size, timeout=10)

    def handler(run: object) -> None:
        barrier.wait()  # breaks (and raises) unless all eight bodies run concurrently

    passed: list[object] = []
    pool = ExecutorPool(size, lambda run: (handler(run), passed.append(run)))  # type: ignore[arg-type]
    pool.start()
    try:
        pool.submit_many([object() for _ in range(size)])
        assert pool.wait_idle(15)
        assert len(passed) == size
        assert not barrier.broken
    finally:
        pool.stop(timeout=5)


def test_queued_runs_count_as_busy_before_any_thread_takes_them() -> None:
    pool = ExecutorPool(3, lambda run: None)  # type: ignore[arg-type]
    # Not started: nothing can take the runs, so they stay queued.
    pool.submit_many([object(), object()])  # type: ignore[list-item]
    assert pool.busy == 2
    assert pool.free() == 1
    pool.start()
    assert pool.wait_idle(5)
    assert pool.free() == 3
    pool.stop(timeout=5)


def test_stop_runs_what_is_queued_then_every_thread_exits() -> None:
    ran: list[int] = []
    lock = threading.Lock()

    def handler(run: int) -> None:
        time.sleep(0.001)
        with lock:
            ran.append(run)

    pool = ExecutorPool(2, handler)  # type: ignore[arg-type]
    pool.start()
    pool.submit_many(list(range(20)))  # type: ignore[arg-type]
    pool.stop(timeout=10)
    assert sorted(ran) == list(range(20))
    assert not any(t.is_alive() for t in pool._threads)


def test_wait_for_free_wakes_when_enough_threads_free_up() -> None:
    pool = blocking_pool(4)
    runs = [Blocking(str(i)) for i in range(4)]
    try:
        pool.submit_many(runs)
        assert pool.free() == 0
        assert not pool.wait_for_free(0.05, at_least=2)
        runs[0].release.set()
        runs[1].release.set()
        assert pool.wait_for_free(5, at_least=2)
        assert pool.free() >= 2
    finally:
        for run in runs:
            run.release.set()
        pool.stop(timeout=5)


def test_lone_runs_handed_over_one_at_a_time_all_start_behind_blocking_ones() -> None:
    # Hand-overs of one run each, back to back, as a claim loop woken by notifications makes
    # them: each wakes a thread of its own.
    pool = blocking_pool(4)
    try:
        for _ in range(50):
            runs = [Blocking(f"run{i}") for i in range(4)]
            for run in runs:
                pool.submit_many([run])  # type: ignore[list-item]
            for run in runs:
                assert run.started.wait(2), f"{run.name} never started"
            for run in runs:
                run.release.set()
            assert pool.wait_idle(5)
    finally:
        pool.stop(timeout=2)
