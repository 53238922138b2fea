"""The progress of long commands: a live bar on a terminal, one summary line otherwise."""

from __future__ import annotations

import io

from django_ultjobs.progress import ProgressReport, progress_report


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_bar_shows_done_total_rate_and_time_left() -> None:
    stream = Terminal()
    with progress_report("retry", stream=stream) as report:
        report(500, 1200)
        report(1000, 1200)
        report(1200, 1200)
    text = stream.getvalue()
    assert "retry" in text and "1200/1200" in text and "100%" in text
    assert "/s" in text  # the rate; tqdm's bar also carries the time left ("<00:00")
    assert "<" in text


def test_elsewhere_one_summary_line_at_the_end() -> None:
    stream = io.StringIO()
    ticks = iter([0.0, 2.0])
    report = ProgressReport("cancel", stream=stream, clock=lambda: next(ticks))
    report(500, 1000)
    assert stream.getvalue() == ""
    report(1000, 1000)
    report.close()
    assert stream.getvalue() == "cancel: 1,000 of 1,000 jobs in 2.0 s (500/s)\n"


def test_nothing_to_do_writes_nothing() -> None:
    stream = io.StringIO()
    with progress_report("retry", stream=stream):
        pass
    assert stream.getvalue() == ""
