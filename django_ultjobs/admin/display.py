"""Formatting for the jobs pages: short durations, escaped and truncated payloads, links."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from django.contrib.admin.utils import quote
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext

#: Characters of a payload (arguments, result, a traceback) shown before it is cut: a job called
#: with a 5 MB document must not make its page 5 MB (or hang the browser rendering it).
MAX_SHOWN = 10_000
#: Characters of an attempt's error shown in the attempts table.
MAX_SHOWN_INLINE = 2_000
EMPTY = "—"
#: Where an identifier may wrap: after the separators of job names (``shop.send_receipt``,
#: ``heartbeat_tick``), worker ids (``host:pid:random``), enqueuers (``user:a@b.c``), slot keys
#: and queue lists. None of them is a line-break opportunity to a browser.
_BREAK_AFTER = re.compile(r"([_.:@/,])")


def duration(seconds: float) -> str:
    """Return ``seconds`` as one short unit: ``12 s``, ``3 min``, ``2.5 h``, ``4.0 d``."""
    s = abs(seconds)
    if s < 60:
        return gettext("%(seconds)s s") % {"seconds": f"{s:.0f}"}
    if s < 3600:
        return gettext("%(minutes)s min") % {"minutes": f"{s / 60:.0f}"}
    if s < 86400:
        return gettext("%(hours)s h") % {"hours": f"{s / 3600:.1f}"}
    return gettext("%(days)s d") % {"days": f"{s / 86400:.1f}"}


def run_time(seconds: float) -> str:
    """Return how long a run took, to the millisecond under a second (``340 ms``, ``2.5 s``,
    ``12 s``, ``1 min 12 s``, ``2.5 h``): most runs take less than one, and ``0 s`` says
    nothing."""
    s = abs(seconds)
    if s < 1:
        return gettext("%(ms)s ms") % {"ms": f"{s * 1000:.0f}"}
    if s < 10:
        return gettext("%(seconds)s s") % {"seconds": f"{s:.1f}"}
    if s < 60:
        return gettext("%(seconds)s s") % {"seconds": f"{s:.0f}"}
    if s < 3600:
        minutes, rest = divmod(round(s), 60)
        return gettext("%(minutes)s min %(seconds)s s") % {"minutes": minutes, "seconds": rest}
    return duration(s)


def breakable(text: str) -> SafeString:
    """Return ``text`` escaped, with a line-break opportunity (``<wbr>``) after each separator:
    a narrow column wraps ``worker_serial_block_until`` at its underscores, never inside a word
    (which ``overflow-wrap: anywhere`` did: ``heart/beat_/tick``)."""
    # Safe: escaped first, and the entities escape() writes (&amp; &#x27; ...) hold no separator.
    return mark_safe(_BREAK_AFTER.sub(r"\1<wbr>", str(escape(text))))


def seconds_between(earlier: datetime | None, later: datetime | None) -> float | None:
    """Return ``later - earlier`` in seconds, or None when either is unknown."""
    if earlier is None or later is None:
        return None
    return (later - earlier).total_seconds()


def ago(moment: datetime | None, now: datetime | None) -> str:
    """Return ``3 s ago`` (or ``in 3 s`` for a moment still ahead)."""
    delta = seconds_between(moment, now)
    if delta is None:
        return EMPTY
    if delta >= 0:
        return gettext("%(duration)s ago") % {"duration": duration(delta)}
    return gettext("in %(duration)s") % {"duration": duration(delta)}


def stamp(moment: datetime | None, now: datetime | None = None) -> str:
    """Return a moment to the second in the site's time zone, and how far it is from ``now``.

    Seconds matter here (leases are seconds long), and Django's default format drops them.
    """
    if moment is None:
        return EMPTY
    text = timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")
    return text if now is None else f"{text} ({ago(moment, now)})"


def truncated(text: str, limit: int = MAX_SHOWN) -> tuple[str, int]:
    """Return ``text`` cut to ``limit`` characters, and how many were cut."""
    if len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


def pre(text: str, limit: int = MAX_SHOWN) -> SafeString | str:
    """Return ``text`` pre-formatted and escaped, cut to ``limit`` with a note saying so."""
    if not text:
        return EMPTY
    shown, cut = truncated(text, limit)
    if cut:
        note = gettext("… %(cut)s more characters not shown (%(total)s in all; the full value "
                       "is in the database).") % {"cut": f"{cut:,}", "total": f"{len(text):,}"}
        return format_html('<pre class="ultjobs-pre">{}</pre><p class="ultjobs-cut">{}</p>',
                           shown, note)
    return format_html('<pre class="ultjobs-pre">{}</pre>', shown)


def exception_line(text: str) -> str:
    """Return what a traceback ends with: the exception and its message (and any notes).

    A traceback's frames, source lines and ``^^^`` markers are indented; the exception that
    was raised is the unindented text after the last of them. An error that is not a traceback
    (``no job registered as "x"``) is its own line.
    """
    lines = text.strip().splitlines()
    if not lines:
        return ""
    if not lines[0].startswith("Traceback"):
        return lines[0]
    last_indented = max((i for i, line in enumerate(lines) if line[:1].isspace()), default=0)
    return "\n".join(lines[last_indented + 1:]).strip() or lines[-1].strip()


def error_block(text: str, limit: int = MAX_SHOWN) -> SafeString | str:
    """Return an error with its exception line first and the full traceback expandable.

    The line an operator looks for is the last of a traceback, so a box showing its top hid
    it; here it comes first, and the traceback (escaped, cut to ``limit``) is one click away.
    """
    if not text.strip():
        return EMPTY
    line = exception_line(text)
    if line.strip() == text.strip():
        return format_html('<div class="ultjobs-error"><p class="ultjobs-exception">{}</p></div>',
                           line)
    return format_html(
        '<div class="ultjobs-error"><p class="ultjobs-exception">{}</p>'
        '<details class="ultjobs-traceback"><summary>{}</summary>{}</details></div>',
        truncated(line, 1000)[0], gettext("traceback"), pre(text, limit))


def pretty_json(value: Any, limit: int = MAX_SHOWN) -> SafeString | str:
    """Return a JSON value indented, escaped and cut to ``limit`` characters."""
    try:
        text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (RecursionError, ValueError) as exc:
        # Indenting recurses in Python: a value the database holds (and json could read) may
        # nest too deep to be written out again. Its page must still render
        # (rule 15 (undecodable-row-fails-alone)).
        return undecodable(f"{type(exc).__name__}: {exc}", "shown")
    return pre(text, limit)


def undecodable(reason: str, what: str = "decoded") -> SafeString:
    """Say that a stored value cannot be decoded (or shown), and why, instead of a server error."""
    if what == "shown":
        message = gettext("The stored value cannot be shown (%(reason)s); it is left in the "
                          "database as it is.")
    else:
        message = gettext("The stored value cannot be decoded (%(reason)s); it is left in the "
                          "database as it is.")
    return format_html('<p class="ultjobs-flag">{}</p>', message % {"reason": reason})


def admin_link(viewname: str, pk: Any, label: str) -> SafeString | str:
    """Return a link to an admin page of ``pk`` (escaped), or just the label if there is none."""
    try:
        url = reverse(f"admin:{viewname}", args=[quote(pk)])
    except NoReverseMatch:
        return label
    return format_html('<a href="{}">{}</a>', url, label)


def job_link(job_id: int | None, label: str | None = None) -> SafeString | str:
    """Return a link to a job's page."""
    if job_id is None:
        return EMPTY
    return admin_link("django_ultjobs_job_change", job_id, label or f"#{job_id}")


def worker_link(worker_id: str) -> SafeString | str:
    """Return a link to a worker's page (its id is ``<host>:<pid>:<random>``)."""
    if not worker_id:
        return EMPTY
    return admin_link("django_ultjobs_worker_change", worker_id, breakable(worker_id))


def split_holder(holder: str) -> tuple[str, int | None]:
    """Split a lease holder ``"<worker_id>:<job_id>"`` (rule 5 (fleet-cap)) into its worker id and
    job id.

    The worker id has colons of its own (``host:pid:random``), so the job id is what follows
    the last one. A holder written by something else comes back whole, with no job.
    """
    worker_id, sep, job_text = holder.rpartition(":")
    job_id = parse_job_id(job_text) if sep else None
    if job_id is None:
        return holder, None
    return worker_id, job_id


def parse_job_id(text: str) -> int | None:
    """Return the job id ``text`` spells in ASCII digits, or None if it is not one.

    Not ``str.isdigit()``: it is true for ``"²"`` and other Unicode digits that ``int()``
    refuses, and a URL or a form that carries one must get "no such job", never a server error.
    Past 18 digits no bigint id matches (and SQLite refuses the parameter).
    """
    if text.isascii() and text.isdecimal() and len(text) < 19:
        return int(text)
    return None
