"""The executor pool's hand-off: few wake-ups for fast runs, never a run stuck behind a slow one.

The pool wakes one thread per claim and more only when the queue stalls (see pool.py). These
tests hold what that must never cost: a run handed over together with a blocking one still
starts (no head-of-line blocking inside a claim), a claim of N blocking runs runs N at once, and
queued runs count as busy so the claim loop never claims more than there are threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from django_ultjobs.worker import pool as pool_module
from django_ultjobs.worker.pool import ExecutorPool


#: Process CPU clocks for the pool's GIL judgement (pool.py): most of one CPU used all the time
#: (bound by the GIL), none (idle: bodies that block), two (threads running in parallel, in C).
def GIL_BOUND() -> float:
    return 0.85 * time.monotonic()


def IDLE() -> float:
    return 0.0


def PARALLEL() -> float:
    return 2 * time.monotonic()


EVERY_CLOCK = pytest.mark.parametrize("cpu_clock", [time.process_time, GIL_BOUND, IDLE],
                                      ids=["real", "gil-bound", "idle"])


class Blocking:
    """A stand-in run whose body waits for ``release``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = threading.Event()
        self.release = threading.Event()


def blocking_pool(size: int, cpu_clock: Callable[[], float] = time.process_time
                  ) -> ExecutorPool:
    def handler(run: Blocking) -> None:
        run.started.set()
        assert run.release.wait(10), f"{run.name} was never released"

    pool = ExecutorPool(size, handler, cpu_clock=cpu_clock)  # type: ignore[arg-type]
    pool.start()
    return pool


@EVERY_CLOCK
def test_run_behind_a_blocking_run_of_the_same_claim_still_starts(
        cpu_clock: Callable[[], float]) -> None:
    # GIL-bound too: the process may be busy with other runs while this body blocks.
    pool = blocking_pool(4, cpu_clock)
    slow, behind = Blocking("slow"), Blocking("behind")
    try:
        pool.submit_many([slow, behind])
        assert slow.started.wait(5)
        # One thread was woken for the claim and it is stuck in "slow": only the stall watch
        # can give "behind" a thread of its own.
        assert behind.started.wait(5), "a queued run waited behind a blocking body"
        assert not slow.release.is_set()
    finally:
        slow.release.set()
        behind.release.set()
        pool.stop(timeout=5)


@EVERY_CLOCK
def test_a_claim_of_blocking_runs_runs_them_all_at_once(cpu_clock: Callable[[], float]) -> None:
    size = 8
    barrier = threading.Barrier(size, timeout=10)

    def handler(run: object) -> None:
        barrier.wait()  # breaks (and raises) unless all eight bodies run concurrently

    passed: list[object] = []
    pool = ExecutorPool(size, lambda run: (handler(run), passed.append(run)),  # type: ignore[arg-type]
                        cpu_clock=cpu_clock)
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


def threads_taking(runs: int, body: Callable[[], None], *, size: int,
                   cpu_clock: Callable[[], float]) -> set[str]:
    """The names of the threads that ran ``runs`` runs of ``body`` handed over together."""
    seen: set[str] = set()

    def handler(run: object) -> None:
        seen.add(threading.current_thread().name)
        body()

    pool = ExecutorPool(size, handler, cpu_clock=cpu_clock)  # type: ignore[arg-type]
    pool.start()
    try:
        pool.submit_many([object() for _ in range(runs)])  # type: ignore[misc]
        assert pool.wait_idle(10)
    finally:
        pool.stop(timeout=5)
    return seen


@pytest.mark.parametrize("cpu_clock", [time.process_time, IDLE, PARALLEL],
                         ids=["real", "idle", "parallel"])
def test_runs_behind_short_bodies_get_more_threads_as_they_wait(
        cpu_clock: Callable[[], float]) -> None:
    # 16 runs of 0.5 ms handed over together: the one thread woken for the claim keeps taking them,
    # so the queue never stalls, but its oldest run ages past 1 ms and the watch adds threads
    # (1, 2, 4, ...) instead of letting one thread run all sixteen one after another. So it does
    # when the process's threads run in parallel (over one CPU): the GIL is not what they wait for.
    seen = threads_taking(16, lambda: time.sleep(0.0005), size=8, cpu_clock=cpu_clock)
    assert len(seen) >= 2, "every run went through one thread"


def test_a_gil_bound_process_adds_no_thread_to_threads_taking_short_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 200 short runs of pure Python handed over together (each lets the
    # GIL go at its end, so the watch looks at its pace), in a process using one CPU (bound by
    # the GIL). The thread woken for them keeps taking them; more threads would wait for the
    # same GIL and only switch it more. Before, the watch doubled the threads every millisecond
    # the oldest run waited (1, 2, 4, ... 32). Neither the stall nor the runs' measured length
    # is what this test is about: a loaded machine may keep the one thread from taking for 5 ms
    # (a thread per run), or stretch a window's runs past 0.2 ms; and the first windows, judged
    # before any run finished, may double once or twice.
    monkeypatch.setattr(pool_module, "BUSY_STALL", 1.0)
    monkeypatch.setattr(pool_module, "SHORT_RUN", 0.01)

    def body() -> None:
        deadline = time.perf_counter() + 0.00005
        while time.perf_counter() < deadline:
            pass
        time.sleep(0)

    seen = threads_taking(200, body, size=32, cpu_clock=GIL_BOUND)
    assert len(seen) <= 4, f"{len(seen)} threads took 200 short runs of a GIL-bound process"


class CountingCondition(threading.Condition):
    """The stall watch's condition, counting the times its waits end."""

    def __init__(self, lock: threading.RLock) -> None:
        super().__init__(lock)
        self.woken = 0

    def wait(self, timeout: float | None = None) -> bool:
        try:
            return super().wait(timeout)
        finally:
            self.woken += 1


def test_a_lone_run_for_an_idle_thread_leaves_the_stall_watch_asleep() -> None:
    # An idle pickup wakes the thread that runs it, nothing else: a wake-up is its latency.
    done = threading.Event()
    pool = ExecutorPool(4, lambda run: done.set())  # type: ignore[arg-type, misc]
    watch = pool._watch = CountingCondition(pool._lock)  # type: ignore[assignment]
    pool.start()
    try:
        deadline = time.monotonic() + 5
        while not pool._watch_parked and time.monotonic() < deadline:
            time.sleep(0.001)
        for _ in range(20):
            done.clear()
            pool.submit(Blocking("lone"))  # type: ignore[arg-type]
            assert done.wait(5)
            assert pool.wait_idle(5)
        assert watch.woken == 0
    finally:
        pool.stop(timeout=2)


def test_lone_runs_handed_over_one_at_a_time_all_start_behind_blocking_ones() -> None:
    # The watch is woken only when a run may wait: two queued, or no idle thread. Hand-overs of
    # one run each, back to back, as a claim loop woken by notifications makes them.
    pool = blocking_pool(4)
    try:
        for _ in range(50):
            runs = [Blocking(f"run{i}") for i in range(4)]
            for run in runs:
                pool.submit(run)  # type: ignore[arg-type]
            for run in runs:
                assert run.started.wait(2), f"{run.name} never started"
            for run in runs:
                run.release.set()
            assert pool.wait_idle(5)
    finally:
        pool.stop(timeout=2)


def test_a_gil_bound_process_still_adds_threads_for_runs_that_block() -> None:
    # Another thread keeps the process at one CPU while a claim of 64 runs that each block for
    # 3 ms arrives: they wait for threads, not for the GIL, so the watch doubles the threads
    # working the queue as it does in an idle process. Taken one after another they would start
    # over 190 ms; with helpers the last starts within a few milliseconds.
    started: list[float] = []

    def handler(run: object) -> None:
        started.append(time.monotonic())
        time.sleep(0.003)

    pool = ExecutorPool(64, handler, cpu_clock=GIL_BOUND)  # type: ignore[arg-type]
    pool.start()
    # A window judged before the hand-over: the process is GIL-bound from the first look (else
    # the idle process's 1 ms stall would wake every thread, whatever the bound path does).
    time.sleep(2 * pool_module.SAMPLE)
    try:
        handed = time.monotonic()
        pool.submit_many([object() for _ in range(64)])  # type: ignore[misc]
        assert pool.wait_idle(10)
        last = max(started) - handed
        assert last < 0.1, f"the last run started {last:.3f} s after the hand-over"
    finally:
        pool.stop(timeout=5)
