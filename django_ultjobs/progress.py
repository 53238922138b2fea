"""Progress of a long command: a live bar on a terminal, one summary line otherwise.

```python
with progress_report("retry", stream=sys.stderr) as report:
    retry_jobs(ids, progress=report)        # report(done, total) after each chunk
```

On a terminal, tqdm draws done/total, the rate and the time left; written to a file or a pipe
(cron, CI, ``kubectl logs``), a bar's carriage returns would only fill the log, so nothing is
shown until the end and then one line: ``retry: 12,000 of 12,000 jobs in 4.2 s (2,857/s)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from tqdm import tqdm


class ProgressReport:
    """A ``(done, total)`` callback that shows how far a command is (see the module)."""

    def __init__(self, what: str, *, stream: TextIO, unit: str = "jobs",
                 tty: bool | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.unit = unit
        self.stream = stream
        self.tty = _isatty(stream) if tty is None else tty
        self._clock = clock
        self._started = clock()
        self._bar: tqdm[Any] | None = None
        self.done = 0
        self.total = 0

    def __call__(self, done: int, total: int) -> None:
        """Record that ``done`` of ``total`` are through."""
        self.done, self.total = done, total
        if not self.tty:
            return
        if self._bar is None:
            self._bar = tqdm(total=total, desc=self.what, unit=f" {self.unit}",
                             file=self.stream, dynamic_ncols=True, leave=True)
        self._bar.total = total
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        """End the bar, or write the summary line (none when there was nothing to do)."""
        if self._bar is not None:
            self._bar.close()
            return
        if self.tty or not self.total:
            return
        elapsed = self._clock() - self._started
        rate = f" ({self.done / elapsed:,.0f}/s)" if elapsed > 0 else ""
        self.stream.write(f"{self.what}: {self.done:,} of {self.total:,} {self.unit} in "
                          f"{elapsed:.1f} s{rate}\n")
        self.stream.flush()


@contextmanager
def progress_report(what: str, *, stream: TextIO, unit: str = "jobs",
                    tty: bool | None = None) -> Iterator[ProgressReport]:
    """A ``ProgressReport`` closed when the block ends, however it ends."""
    report = ProgressReport(what, stream=stream, unit=unit, tty=tty)
    try:
        yield report
    finally:
        report.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
