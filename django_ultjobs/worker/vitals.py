"""What the health probes read: when the claim loop and the heartbeat last made progress, and when
the database last answered (rules 121 (probe-alive) and 122 (probe-ready)).

The claim loop notes each round it starts and the longest wait that round may take; the heartbeat
notes each beat and whether its statement reached the database. A probe compares those instants
with the clock and never touches the database itself: a probe every few seconds from every
replica must not become load, nor hang on the outage it should report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: A heartbeat error is shown up to this many characters: the probe's answer is one line.
MAX_REASON = 200


def outage_backoff(failures: int) -> float:
    """Seconds the claim loop waits after its ``failures``-th claim in a row failed: 0.4 s
    doubling to 30 s, so an outage is waited out without a storm of claims."""
    return min(30.0, 0.2 * 2 ** min(failures, 8))


class Vitals:
    """The instants the probes judge by, written by the claim loop and the heartbeat."""

    def __init__(self, *, heartbeat_interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.heartbeat_interval = heartbeat_interval
        self.clock = clock
        #: When the claim loop last started a round, and the longest wait that round may take;
        #: None before its first round.
        self.round_at: float | None = None
        self.round_allowance = 0.0
        #: Set when the claim loop ended on purpose (stopping, recycling, a drained burst).
        self.claims_ended = False
        #: When the heartbeat last beat (or the worker registered, before the first beat).
        self.beat_at: float | None = None
        #: When the database last answered this worker (its row first written, then each beat).
        self.answered_at: float | None = None
        #: The last beat's error, one line; None when it reached the database.
        self.failure: str | None = None
        self.failed_at: float | None = None
        # Written by two threads, read by the probes' threads: each write is one field, and a
        # probe reads a consistent pair under the lock.
        self._lock = threading.Lock()

    # -- written by the worker ------------------------------------------------------------------

    def registered(self) -> None:
        """The worker's row is written: the database answered, the heartbeat's clock starts."""
        with self._lock:
            self.answered_at = self.beat_at = self.clock()

    def claim_round(self, allowance: float) -> None:
        """The claim loop starts a round that may wait up to ``allowance`` seconds."""
        with self._lock:
            self.round_at = self.clock()
            self.round_allowance = allowance

    def claims_done(self) -> None:
        with self._lock:
            self.claims_ended = True

    def beat(self, error: BaseException | None = None) -> None:
        """The heartbeat beat; ``error`` is what its statement raised, if it did."""
        with self._lock:
            self.beat_at = now = self.clock()
            if error is None:
                self.answered_at = now
                self.failure = self.failed_at = None
            else:
                self.failure = " ".join(f"{type(error).__name__}: {error}".split())[:MAX_REASON]
                self.failed_at = now

    # -- the bounds -----------------------------------------------------------------------------

    @property
    def heartbeat_bound(self) -> float:
        """Seconds without a beat before the heartbeat counts as stuck: one is due every
        interval, and a slow statement gets two more (a lease outlives two missed beats)."""
        return 3 * self.heartbeat_interval

    @property
    def database_bound(self) -> float:
        """Seconds without an answer before the database counts as gone: one interval to the
        next heartbeat, and one for its statement."""
        return 2 * self.heartbeat_interval

    def round_bound(self, allowance: float) -> float:
        """Seconds a claim round may take: its longest wait (the poll interval, or the outage
        backoff after failed claims), plus a heartbeat interval for its statements."""
        return allowance + self.heartbeat_interval

    # -- read by the probes ---------------------------------------------------------------------

    def not_alive(self) -> str | None:
        """Why the worker is not alive (one line), or None: the claim loop and the heartbeat
        each made progress within their bound. A worker still starting is alive."""
        with self._lock:
            now = self.clock()
            round_at, allowance, ended = self.round_at, self.round_allowance, self.claims_ended
            beat_at = self.beat_at
        if round_at is not None and not ended:
            bound = self.round_bound(allowance)
            if now - round_at > bound:
                return f"claim loop: no round for {now - round_at:.1f} s (bound {bound:.1f} s)"
        if beat_at is not None and now - beat_at > self.heartbeat_bound:
            return (f"heartbeat: no beat for {now - beat_at:.1f} s "
                    f"(bound {self.heartbeat_bound:.1f} s)")
        return None

    def not_ready(self, *, started: bool, stopping: bool) -> str | None:
        """Why the worker is not ready (one line), or None: it is registered, not stopping (nor
        draining to recycle), alive, and the database answered its last beat within the bound."""
        if stopping or self.claims_ended:
            return "draining: the worker is stopping"
        if not started:
            return "starting: the worker is not registered yet"
        dead = self.not_alive()
        if dead is not None:
            return dead
        with self._lock:
            now = self.clock()
            answered_at, failure, failed_at = self.answered_at, self.failure, self.failed_at
        if failure is not None and failed_at is not None:
            return f"database: the heartbeat failed {now - failed_at:.1f} s ago: {failure}"
        if answered_at is None or now - answered_at > self.database_bound:
            since = "ever" if answered_at is None else f"{now - answered_at:.1f} s"
            return f"database: no answer for {since} (bound {self.database_bound:.1f} s)"
        return None
