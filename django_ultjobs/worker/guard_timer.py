"""A child's guard: a kernel timer that sends ``SIGKILL`` to this process when it fires.

A POSIX timer (``timer_create`` on ``CLOCK_MONOTONIC``, notifying by ``SIGKILL``) belongs to
this process alone and its signal can be neither caught, ignored nor blocked: a body that sets
its own ``SIGALRM`` handler, calls ``signal.alarm``, or ignores every signal it can, leaves the
guard as it was (rule 141 (cap-without-cooperation)). The interval timer ``ITIMER_REAL`` it
replaces was shared with any such body, which could disarm it without knowing.

Where the C library has no ``timer_create`` (not Linux), the guard falls back to
``ITIMER_REAL`` with ``SIGALRM`` at its default action, which ends the process too unless the
body takes ``SIGALRM`` for itself.
"""

from __future__ import annotations

import ctypes
import signal

#: ``CLOCK_MONOTONIC`` and ``SIGEV_SIGNAL`` as Linux numbers them.
_CLOCK_MONOTONIC = 1
_SIGEV_SIGNAL = 0


class _SigEvent(ctypes.Structure):
    # struct sigevent: a union sigval, the signal, how to notify, then padding to 64 bytes.
    _fields_ = [("sigev_value", ctypes.c_void_p), ("sigev_signo", ctypes.c_int),
                ("sigev_notify", ctypes.c_int), ("_pad", ctypes.c_byte * 48)]


class _TimeSpec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _TimeSpec), ("it_value", _TimeSpec)]


class GuardTimer:
    """One process's guard: ``arm(seconds)`` ends the process that many seconds from now unless
    armed again or disarmed first. Made in the process it guards (a timer is not
    inherited across ``fork``)."""

    def __init__(self) -> None:
        self._timer: ctypes.c_void_p | None = None
        self._libc: ctypes.CDLL | None = None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            timer = ctypes.c_void_p()
            event = _SigEvent(sigev_signo=signal.SIGKILL, sigev_notify=_SIGEV_SIGNAL)
            if libc.timer_create(_CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(timer)) == 0:
                self._libc, self._timer = libc, timer
        except (OSError, AttributeError):
            pass
        if self._timer is None:
            # The fallback's signal ends the process (its default action), never a Python
            # handler: a handler needs the main thread, which the body may hold for ever.
            signal.signal(signal.SIGALRM, signal.SIG_DFL)

    @property
    def kills(self) -> bool:
        """Whether the guard is the POSIX timer (True) or the ``SIGALRM`` fallback."""
        return self._timer is not None

    def arm(self, seconds: float) -> None:
        self._set(max(seconds, 0.001))

    def disarm(self) -> None:
        self._set(0.0)

    def _set(self, seconds: float) -> None:
        if self._libc is None or self._timer is None:
            signal.setitimer(signal.ITIMER_REAL, seconds)
            return
        whole = int(seconds)
        spec = _ITimerSpec(it_value=_TimeSpec(whole, int((seconds - whole) * 1e9)))
        if self._libc.timer_settime(self._timer, 0, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timer_settime failed for the child's guard")
