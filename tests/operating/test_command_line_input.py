"""``manage.py ultjobs`` and ``prunejobs`` as a shell runs them, on SQLite and PostgreSQL: a byte
that is not UTF-8 (Python hands it over as a lone surrogate) and digits that are not ASCII are
refused naming what is wrong, in the command's own words, never a traceback and never acted on
as something else (rule 77 (cli-through-operations))."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from django_ultjobs.models import Job, QueuePause
from tests.conftest import REPO, worker_env

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

#: ``$'\xff'`` in a shell: a byte no UTF-8 text holds.
BAD_BYTE = b"\xff"


def command(alias: str, *args: str | bytes) -> subprocess.CompletedProcess[str]:
    """Run ``python -m django <args> --database alias`` with the arguments as raw bytes."""
    argv = [os.fsencode(sys.executable), b"-m", b"django",
            *(a if isinstance(a, bytes) else a.encode() for a in args),
            b"--database", alias.encode()]
    return subprocess.run(argv, cwd=REPO, env=worker_env(alias), capture_output=True,
                          text=True, errors="backslashreplace", timeout=120)


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    """What the command said on stderr, without Django's system check report (the suite's
    SQLite is in the mode W010 warns of) and without argparse's usage lines."""
    assert result.returncode in (1, 2), (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if lines and lines[0] == "System check identified some issues:":
        lines = [line for line in lines[1:]
                 if not line.startswith(("WARNINGS:", "?: (", "\tHINT:"))]
    if result.returncode == 2:  # argparse: its usage, then one line naming the argument
        assert lines[0].startswith("usage:"), lines
        lines = [line for line in lines if ": error: " in line]
    return lines


#: Text arguments carrying the byte, and what the one line says.
UNDECODABLE = [
    (("ultjobs", "list", "--queue", BAD_BYTE), "a queue name cannot contain"),
    (("ultjobs", "list", "--job", BAD_BYTE), "a job name cannot contain"),
    (("ultjobs", "list", "--tag", BAD_BYTE), "--tag"),
    (("ultjobs", "retry", "--failed", "--job", BAD_BYTE), "a job name cannot contain"),
    (("ultjobs", "pause", BAD_BYTE), "a queue name cannot contain"),
    (("ultjobs", "pause", "q", "--reason", BAD_BYTE), "the reason cannot contain"),
    (("ultjobs", "resume", BAD_BYTE), "a queue name cannot contain"),
    (("ultjobs", "cancel", "1", "--reason", BAD_BYTE), "cannot contain a NUL character or a "
                                                      "lone surrogate"),
    (("ultjobs", "list", "--since", BAD_BYTE), "--since takes a span"),
]


@pytest.mark.parametrize(("args", "says"), UNDECODABLE,
                         ids=[" ".join(map(str, a[0][1:3])) for a in UNDECODABLE])
def test_an_undecodable_byte_is_one_line_naming_what_it_is(
        alias: str, args: tuple[str | bytes, ...], says: str) -> None:
    Job.objects.using(alias).create(name="add")
    [line] = error_lines(command(alias, *args))
    assert line.startswith("CommandError: ") and says in line, line
    # The byte shown as Python reads it, or named for what it became.
    assert "\\udcff" in line or "lone surrogate" in line, line
    assert not QueuePause.objects.using(alias).exists()


#: Ids and numbers Python's int() reads as another number, or at all; each refused by name.
ID = "a job id is a whole number in the digits 0-9"
NOT_ASCII = [
    (("ultjobs", "show", "\u0661\u0662"), f"argument id: {ID}"),
    (("ultjobs", "show", "+7"), f"argument id: {ID}"),
    (("ultjobs", "cancel", "7_0"), f"argument ID: {ID}"),
    (("ultjobs", "retry", "\u0661\u0662"), f"argument ID: {ID}"),
    (("ultjobs", "list", "--limit", "\u0665"), "argument --limit: not a whole number"),
    (("ultjobs", "list", "--since", "\u0661\u0662h"), "--since takes a span"),
    (("prunejobs", "--days", "\u0661\u0662"), "argument --days: not a number"),
    (("prunejobs", "--days", "1_0"), "argument --days: not a number"),
    (("prunejobs", "--batch-size", "1_0"), "argument --batch-size: not a whole number"),
]


@pytest.mark.parametrize(("args", "says"), NOT_ASCII, ids=[" ".join(a[0]) for a in NOT_ASCII])
def test_an_id_or_number_is_ascii_digits_only(alias: str, args: tuple[str, ...],
                                              says: str) -> None:
    # Jobs 7, 12 and 70 are there: a refused id must not act on the job it would read as.
    for job_id in (7, 12, 70):
        Job.objects.using(alias).create(id=job_id, name="add", status="failed")
    [line] = error_lines(command(alias, *args))
    assert says in line, line
    assert set(Job.objects.using(alias).values_list("status", flat=True)) == {"failed"}


def test_a_job_id_in_ascii_digits_still_acts(alias: str) -> None:
    Job.objects.using(alias).create(id=70, name="add", status="failed")
    result = command(alias, "ultjobs", "retry", "070")
    assert result.returncode == 0, result.stderr
    assert Job.objects.using(alias).get(id=70).status == "queued"
