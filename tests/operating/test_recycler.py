"""The recycling bounds on their own (rule 76 (recycle-at-bound)): room never past max_jobs, memory
read rarely."""

from __future__ import annotations

import pytest

from django_ultjobs.exceptions import JobConfigurationError
from django_ultjobs.worker.options import WorkerOptions
from django_ultjobs.worker.recycle import MEMORY_CHECK_INTERVAL, Recycler, resident_memory_mb


def test_room_never_lets_a_claim_pass_max_jobs() -> None:
    recycler = Recycler(5, None)
    assert recycler.room(4) == 4
    recycler.note_started(4)
    assert recycler.room(4) == 1
    assert not recycler.reached()
    recycler.note_started(1)
    assert recycler.room(4) == 0
    assert recycler.reached() and recycler.reason == "max-jobs"


def test_without_bounds_the_room_is_the_free_threads() -> None:
    recycler = Recycler(None, None)
    recycler.note_started(10_000)
    assert recycler.room(8) == 8 and not recycler.reached()


def test_memory_is_read_once_per_interval_and_only_after_a_run_started() -> None:
    readings: list[float] = []
    now = [0.0]

    def memory() -> float:
        readings.append(now[0])
        return 300.0 if now[0] >= 5 else 100.0

    recycler = Recycler(None, 200.0, memory=memory, clock=lambda: now[0])
    assert not recycler.reached() and readings == []
    recycler.note_started(1)
    assert not recycler.reached()
    now[0] = MEMORY_CHECK_INTERVAL / 2
    assert not recycler.reached()
    assert len(readings) == 1
    now[0] = 5.0
    assert recycler.reached()
    assert (recycler.reason, recycler.memory_mb) == ("max-memory", 300.0)


def test_resident_memory_is_a_plausible_number_of_mib() -> None:
    assert 5 < resident_memory_mb() < 100_000


@pytest.mark.parametrize(("field", "value"), [
    ("max_jobs", 0), ("max_jobs", -1), ("max_jobs", 1.5), ("max_jobs", True),
    ("max_memory", 0), ("max_memory", -5.0), ("max_memory", float("nan")),
    ("max_memory", float("inf")),
])
def test_a_bound_that_cannot_work_is_refused_naming_its_flag(field: str, value: object) -> None:
    with pytest.raises(JobConfigurationError, match="--" + field.replace("_", "-")):
        WorkerOptions(**{field: value})
