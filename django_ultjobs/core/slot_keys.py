"""The key of a job's fleet slots: ``job:<name>``, in one place for Python and SQL."""

from __future__ import annotations

#: What every fleet-slot key starts with; the rest is the job's name.
SLOT_KEY_PREFIX = "job:"
#: The length of ``Slot.key``, the column the key is stored in.
MAX_SLOT_KEY = 200
#: The longest name a job with ``concurrency=`` may have, so its key fits the column.
MAX_SLOT_JOB_NAME = MAX_SLOT_KEY - len(SLOT_KEY_PREFIX)


def slot_key_for(job_name: str) -> str:
    """The slot key of ``job_name``'s fleet slots."""
    return f"{SLOT_KEY_PREFIX}{job_name}"

#: What the key of a per-key cap's slots starts with (``@job(concurrency_key=...)``): then the
#: job name's length, so no job name and key can spell another pair's slot key.
KEYED_SLOT_KEY_PREFIX = "key:"


def keyed_slot_key(job_name: str, key: str) -> str:
    """The slot key of ``job_name``'s runs of concurrency key ``key``:
    ``key:<len(name)>:<name>:<key>``."""
    return f"{KEYED_SLOT_KEY_PREFIX}{len(job_name)}:{job_name}:{key}"


def split_slot_key(slot_key: str) -> tuple[str, str | None]:
    """``(job name, concurrency key)`` of a slot key; the key is None for a per-job cap.

    A text that is neither form comes back whole as the name (the admin shows it as it is)."""
    if slot_key.startswith(SLOT_KEY_PREFIX):
        return slot_key[len(SLOT_KEY_PREFIX):], None
    if slot_key.startswith(KEYED_SLOT_KEY_PREFIX):
        length, _, rest = slot_key[len(KEYED_SLOT_KEY_PREFIX):].partition(":")
        if length.isdigit() and rest[int(length):int(length) + 1] == ":":
            return rest[:int(length)], rest[int(length) + 1:]
    return slot_key, None
