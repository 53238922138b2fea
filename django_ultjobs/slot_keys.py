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
