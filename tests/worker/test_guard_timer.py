"""The child's guard (rule 141 (cap-without-cooperation)): a kernel timer whose ``SIGKILL`` no
body can catch, ignore or disarm with alarms of its own."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from django_ultjobs.worker import guard_timer
from django_ultjobs.worker.guard_timer import GuardTimer

BODY = textwrap.dedent("""
    import signal, sys, time
    from django_ultjobs.core.clocks import lease_clock
    from django_ultjobs.worker.guard_timer import GuardTimer

    guard = GuardTimer()
    guard.arm(lease_clock() + 0.3)
    # A body with alarms of its own: SIGALRM ignored, the interval timer cancelled.
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.setitimer(signal.ITIMER_REAL, 0)
    {after}
    end = time.monotonic() + {seconds}
    while time.monotonic() < end:
        pass
    sys.exit(0)
""")


def _run(after: str = "", seconds: float = 5.0) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-c", BODY.format(after=after, seconds=seconds)],
                          timeout=30, check=False, capture_output=True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX timers: Linux")
def test_the_guard_kills_a_body_that_takes_sigalrm_for_itself() -> None:
    assert GuardTimer().kills and guard_timer.available()
    ended = _run()
    assert ended.returncode == -signal.SIGKILL, ended.stderr.decode()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX timers: Linux")
def test_a_disarmed_guard_lets_the_body_finish() -> None:
    ended = _run("guard.disarm()", seconds=0.6)
    assert ended.returncode == 0, ended.stderr.decode()
