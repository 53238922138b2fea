"""Progress of long work: done / total, rate and time left on a terminal, silence elsewhere.

One helper for every command that may run for minutes (``prunejobs`` over millions of rows, the
bulk retry and cancel of ``manage.py ultjobs``, the benchmarks). On a terminal it draws a tqdm
bar; when the output is a file, a pipe or cron's mail it draws nothing, and the command prints
its one summary line (rule 84 (progress-on-terminal)) (``Progress.summary`` gives its "in 12.3 s,
81,000/s" part).

    with Progress("pruning", total=prunable, unit="job", stream=self.stderr) as bar:
        prune(..., on_batch=bar.advance)
    self.stdout.write(f"pruned {n} jobs {bar.summary()}")
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, TextIO

from tqdm import tqdm

#: Seconds between redraws: a bar redrawn on every batch of a fast loop costs more than the
#: loop's own work, and a terminal cannot show more than a few frames a second anyway.
REDRAW_INTERVAL = 0.5


def terminal_stream(stream: Any) -> TextIO:
    """Return the file under a Django ``OutputWrapper`` (or ``stream`` itself).

    The wrapper ends every write with a newline, which would turn each redraw of the bar (a
    carriage return and the line again) into a new line.
    """
    return getattr(stream, "_out", stream)


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal a person watches (a TTY)."""
    isatty = getattr(terminal_stream(stream), "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed file
        return False


class Progress:
    """Count work done; draw a bar while the stream is a terminal.

    ``total`` may be None (unknown: the bar then shows done and rate, no time left) or set
    later with ``set_total``. ``shown`` is False off a terminal, so a command can skip work
    that only the bar needs (counting the total first).
    """

    def __init__(self, description: str, *, total: int | None = None, unit: str = "job",
                 stream: Any = None) -> None:
        self.description = description
        self.unit = unit
        self.done = 0
        self._stream = terminal_stream(sys.stderr if stream is None else stream)
        self.shown = is_terminal(self._stream)
        self._started = time.monotonic()
        self._ended: float | None = None
        self._bar: tqdm[Any] | None = None
        if self.shown:
            self._bar = tqdm(total=total, desc=description, unit=f" {unit}s",
                             file=self._stream, mininterval=REDRAW_INTERVAL, dynamic_ncols=True,
                             leave=True)

    def set_total(self, total: int | None) -> None:
        """Say how much work there is (the bar can then show time left)."""
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()

    def advance(self, count: int = 1) -> None:
        """Count ``count`` more units done."""
        self.done += count
        if self._bar is not None:
            self._bar.update(count)

    @property
    def elapsed(self) -> float:
        """Seconds since the work began (until ``close``)."""
        return (self._ended or time.monotonic()) - self._started

    def summary(self) -> str:
        """``in 12.3 s, 81,000 jobs/s``: how long the work took and how fast it went."""
        seconds = self.elapsed
        rate = f", {self.done / seconds:,.0f} {self.unit}s/s" if seconds > 0 and self.done else ""
        return f"in {seconds:.1f} s{rate}"

    def close(self) -> None:
        """Stop the clock and leave the bar's last state on the terminal."""
        if self._ended is None:
            self._ended = time.monotonic()
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
