"""A child's guard: a kernel timer that sends ``SIGKILL`` to this process when it fires.

A POSIX timer (``timer_create`` on the lease clock, notifying by ``SIGKILL``) belongs to this
process alone and its signal can be neither caught, ignored nor blocked: a body that sets its own
``SIGALRM`` handler, calls ``signal.alarm``, or ignores every signal it can, leaves the guard as
it was (rule 141 (cap-without-cooperation)). It is armed at an instant of the lease clock
(``core.clocks``), which counts a host's suspension as the database's clock does.

Where ``timer_create`` is unavailable (not Linux, or no C library that has it) the guard falls
back to the interval timer ``ITIMER_REAL`` with ``SIGALRM`` at its default action, which ends the
process too unless the body takes ``SIGALRM`` for itself; the worker logs a warning at start
(``available``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import signal

from ..core.clocks import LEASE_CLOCK_ID, lease_clock

#: ``SIGEV_SIGNAL`` and ``TIMER_ABSTIME`` as Linux numbers them.
_SIGEV_SIGNAL = 0
_TIMER_ABSTIME = 1


class GuardError(RuntimeError):
    """The kernel refused to set the guard's timer."""


class _SigEvent(ctypes.Structure):
    # struct sigevent: a union sigval, the signal, how to notify, then padding to 64 bytes.
    _fields_ = [("sigev_value", ctypes.c_void_p), ("sigev_signo", ctypes.c_int),
                ("sigev_notify", ctypes.c_int),
                ("_pad", ctypes.c_byte * (64 - ctypes.sizeof(ctypes.c_void_p)
                                          - 2 * ctypes.sizeof(ctypes.c_int)))]


class _TimeSpec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _TimeSpec), ("it_value", _TimeSpec)]


def _timers_library() -> ctypes.CDLL | None:
    """The C library's POSIX timers: in libc since glibc 2.34, in librt before."""
    if LEASE_CLOCK_ID is None:
        return None
    for name in (None, ctypes.util.find_library("rt")):
        try:
            lib = ctypes.CDLL(name, use_errno=True)
            lib.timer_create, lib.timer_settime, lib.timer_delete  # noqa: B018
            return lib
        except (OSError, AttributeError):
            continue
    return None


def _create(lib: ctypes.CDLL) -> ctypes.c_void_p | None:
    timer = ctypes.c_void_p()
    event = _SigEvent(sigev_signo=signal.SIGKILL, sigev_notify=_SIGEV_SIGNAL)
    if lib.timer_create(LEASE_CLOCK_ID, ctypes.byref(event), ctypes.byref(timer)) != 0:
        return None
    return timer


def available() -> bool:
    """Whether a guard here is the ``SIGKILL`` timer (else the ``SIGALRM`` fallback)."""
    lib = _timers_library()
    timer = _create(lib) if lib is not None else None
    if lib is None or timer is None:
        return False
    lib.timer_delete(timer)
    return True


class GuardTimer:
    """One process's guard: ``arm(until)`` ends the process at ``until`` (``lease_clock``)
    unless armed again or disarmed first. Made in the process it guards (a timer is not
    inherited across ``fork``)."""

    def __init__(self) -> None:
        self._lib = _timers_library()
        self._timer = _create(self._lib) if self._lib is not None else None
        if self._timer is None:
            # The fallback's signal ends the process (its default action), never a Python
            # handler: a handler needs the main thread, which the body may hold for ever.
            signal.signal(signal.SIGALRM, signal.SIG_DFL)

    @property
    def kills(self) -> bool:
        """Whether the guard is the ``SIGKILL`` timer (True) or the ``SIGALRM`` fallback."""
        return self._timer is not None

    def arm(self, until: float) -> None:
        if not self.kills:
            signal.setitimer(signal.ITIMER_REAL, max(until - lease_clock(), 0.001))
            return
        whole = int(until)
        self._set(_TimeSpec(whole, int((until - whole) * 1e9)), _TIMER_ABSTIME)

    def disarm(self) -> None:
        if not self.kills:
            signal.setitimer(signal.ITIMER_REAL, 0)
            return
        self._set(_TimeSpec(0, 0), 0)

    def _set(self, value: _TimeSpec, flags: int) -> None:
        assert self._lib is not None and self._timer is not None
        spec = _ITimerSpec(it_value=value)
        if self._lib.timer_settime(self._timer, flags, ctypes.byref(spec), None) != 0:
            raise GuardError(f"timer_settime failed (errno {ctypes.get_errno()})")

