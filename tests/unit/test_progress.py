"""Progress of long work: a bar on a terminal, nothing off one (the command's line says it all).

Rule 84 (progress-on-terminal).
"""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_ultjobs.management.progress import Progress, is_terminal
from django_ultjobs.models import Job


class Terminal(io.StringIO):
    """A stream that says it is a TTY, as a person's terminal does."""

    def isatty(self) -> bool:
        return True


def test_off_a_terminal_nothing_is_drawn_and_the_work_is_counted() -> None:
    stream = io.StringIO()
    with Progress("pruning", total=10, stream=stream) as bar:
        bar.advance(4)
        bar.advance(6)
    assert (bar.shown, bar.done, stream.getvalue()) == (False, 10, "")
    assert bar.summary().startswith("in ") and "jobs/s" in bar.summary()


def test_on_a_terminal_the_bar_shows_done_of_total_and_rate() -> None:
    stream = Terminal()
    with Progress("pruning", total=10, stream=stream) as bar:
        bar.advance(3)
        bar.set_total(20)
        bar.advance(17)
    drawn = stream.getvalue()
    assert bar.shown
    assert "pruning" in drawn and "20/20" in drawn and "jobs/s" in drawn, drawn


def test_a_django_output_wrapper_is_seen_through() -> None:
    from django.core.management.base import OutputWrapper

    assert is_terminal(OutputWrapper(Terminal()))
    assert not is_terminal(OutputWrapper(io.StringIO()))
    closed = io.StringIO()
    closed.close()
    assert not is_terminal(closed)


def _finished(alias: str, count: int) -> None:
    old = timezone.now() - timedelta(days=30)
    Job.objects.using(alias).bulk_create(
        Job(name="add", status="succeeded", finished_at=old) for _ in range(count))


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_prunejobs_off_a_terminal_prints_one_summary_line(alias: str) -> None:
    _finished(alias, 7)
    out, err = io.StringIO(), io.StringIO()
    call_command("prunejobs", days=14, batch_size=3, database=alias, stdout=out, stderr=err)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pruned 7 jobs"), lines
    assert " in " in lines[0] and "jobs/s" in lines[0]
    assert err.getvalue() == ""


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_prunejobs_on_a_terminal_draws_the_bar_to_the_total(alias: str) -> None:
    _finished(alias, 7)
    out, err = io.StringIO(), Terminal()
    call_command("prunejobs", days=14, batch_size=3, database=alias, stdout=out, stderr=err)
    assert "7/7" in err.getvalue(), err.getvalue()
    assert out.getvalue().startswith("pruned 7 jobs")
