"""W035: a timeout on a job whose body cannot see its cancellation (rules 55 (timeout-cancels),
56 (overrun-reported))."""

from __future__ import annotations

from django_ultjobs import job
from django_ultjobs.checks import check_timeouts
from django_ultjobs.testing import unregister


def test_a_timeout_without_a_context_is_warned_about() -> None:
    job(name="blind_timeout", timeout=5)(lambda: None)
    job(name="seeing_timeout", timeout=5, takes_context=True)(lambda ctx: None)
    try:
        (warning,) = check_timeouts()
        assert warning.id == "django_ultjobs.W035"
        assert "blind_timeout declare timeout= without takes_context=True" in warning.msg
        assert "seeing_timeout" not in warning.msg
    finally:
        unregister("blind_timeout")
        unregister("seeing_timeout")
    assert check_timeouts() == []
