"""The process pool's plain parts: its options, the cancel reasons that cross to a child, and
the guard's arithmetic (rules 140 (hard-stop), 141 (cap-without-cooperation))."""

from __future__ import annotations

import pickle

import pytest

from django_ultjobs.exceptions import (
    CancelRequestedError,
    JobConfigurationError,
    JobSlotLostError,
    JobTimeoutError,
    LeaseLostError,
    WorkerShutdownError,
)
from django_ultjobs.worker.child import reason_from, reason_state
from django_ultjobs.worker.options import WorkerOptions
from django_ultjobs.worker.process_pool import guard_margin


@pytest.mark.parametrize("reason", [
    JobTimeoutError(job="j", job_id=3, timeout=1.5),
    JobSlotLostError(job="j", job_id=3, key="job:j", slot=0),
    CancelRequestedError("cancelled on request", reason="stop it"),
    LeaseLostError("lost"),
    WorkerShutdownError("stopping"),
])
def test_a_cancel_reason_crosses_to_a_child_whole(reason: Exception) -> None:
    """rule 140 (hard-stop): the child's body sees the cause the worker fired, with its class,
    message and fields (the settlement and ``ctx.cancel_reason`` read them)."""
    again = reason_from(pickle.loads(pickle.dumps(reason_state(reason))))  # type: ignore[arg-type]
    assert type(again) is type(reason)
    assert str(again) == str(reason)
    assert vars(again) == vars(reason)


def test_the_pool_options_are_checked_by_their_flags() -> None:
    """rule 18 (start-mistake-named): a bad pool, process count or per-child bound is refused
    by its flag, and per-child flags without the process pool too."""
    assert WorkerOptions(pool="process", processes=3).places == 3
    assert WorkerOptions(threads=7).places == 7
    for bad, flag in [({"pool": "fork"}, "--pool"),
                      ({"pool": "process", "processes": 0}, "--processes"),
                      ({"pool": "process", "max_jobs_per_child": 0}, "--max-jobs-per-child"),
                      ({"pool": "process", "max_memory_per_child": float("nan")},
                       "--max-memory-per-child"),
                      ({"processes": 2}, "--pool process")]:
        with pytest.raises(JobConfigurationError, match=flag):
            WorkerOptions(**bad)  # type: ignore[arg-type]


def test_the_guard_ends_a_body_before_its_lease_could_lapse() -> None:
    """rule 141 (cap-without-cooperation): the margin is a tenth of the visibility timeout, at
    most 2 s, and always short of it."""
    assert guard_margin(30.0) == 2.0
    assert guard_margin(2.0) == pytest.approx(0.2)
    assert all(0 < guard_margin(t) < t for t in (0.5, 3.0, 600.0))
