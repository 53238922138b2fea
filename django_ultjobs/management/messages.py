"""One-line messages for errors the management commands report instead of a traceback."""

from __future__ import annotations

from django.db import connections

from ..store import unmigrated_message


def one_line(exc: BaseException) -> str:
    """The error's message on one line, with its cause's where the message points there.

    Django's message for a DATABASES ENGINE that does not import says "Check the above
    exception", which a one-line report would have dropped.
    """
    text = " ".join(str(exc).split()) or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and "Check the above exception." in text:
        text = text.replace("Check the above exception.",
                            f"({type(cause).__name__}: {' '.join(str(cause).split())})")
    return text


def unmigrated(alias: str) -> str:
    """Say that the job tables are missing (or old) in ``alias`` and how to create them."""
    return unmigrated_message(alias)


def unknown_alias(alias: str) -> str:
    """Say that ``--database`` names no entry of settings.DATABASES, and which there are."""
    return (f"--database {alias!r} is not in settings.DATABASES "
            f"(there: {', '.join(connections.settings) or 'none'})")
