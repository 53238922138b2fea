"""Read the management commands' numbers as the command line spells them: ASCII digits only.

Python's ``int()`` and ``float()`` read more than an operator means to type: ``"١٢"`` (Arabic-Indic
digits) as 12, ``"+7"`` as 7 and ``"7_0"`` as 70. A job id or a count mistyped so must be refused
by the flag's name, not acted on as another number (rules 18 (start-mistake-named) and
77 (cli-through-operations)). Used as argparse ``type=``; a value passed from code
(``call_command(..., days=3)``) is not text and is checked by the command.
"""

from __future__ import annotations

import re
from argparse import ArgumentTypeError

_WHOLE = re.compile(r"-?[0-9]+")
#: What ``float()`` reads, in ASCII and without the underscores of Python's literals; ``nan`` and
#: ``inf`` pass here and are refused by name by each command's own range check.
_NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
                     r"|[-+]?(?:nan|inf|infinity)", re.IGNORECASE)


def job_id(text: str) -> int:
    """A job id: ASCII digits only (the range is ``operations.check_job_ids``'s to refuse)."""
    if not (text.isascii() and text.isdecimal()):
        raise ArgumentTypeError(f"a job id is a whole number in the digits 0-9, not {text!r}")
    return int(text)


def whole_number(text: str) -> int:
    """A whole number in ASCII digits, with a ``-`` its own range check then refuses by name."""
    if not _WHOLE.fullmatch(text):
        raise ArgumentTypeError(f"not a whole number in the digits 0-9: {text!r}")
    return int(text)


def number(text: str) -> float:
    """A number in ASCII (``2``, ``0.5``, ``1e3``); ``nan`` and ``inf`` are read, for the
    command's range check to refuse by name."""
    if not _NUMBER.fullmatch(text):
        raise ArgumentTypeError(f"not a number in the digits 0-9: {text!r}")
    return float(text)
