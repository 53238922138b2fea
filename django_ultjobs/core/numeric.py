"""Numbers as the option checks read and show them: an int may be of any size.

``math.isfinite(2**1024)`` raises ``OverflowError`` and ``repr(10**5000)`` raises ``ValueError``,
so a check that used either on a number it was given failed with an error naming no option
instead of refusing the number by the option's name (rule 16 (bad-input-refused)).
"""

from __future__ import annotations

import math
from typing import Any


def is_finite(value: float) -> bool:
    """Whether the number ``value`` is finite: an int always is, whatever its size."""
    return isinstance(value, int) or math.isfinite(value)


def is_seconds(value: Any, most: float) -> bool:
    """Whether ``value`` is a number of seconds above 0 and at most ``most``: an int or a float
    (not a bool, not ``nan``), compared without converting an int of any size to a float."""
    return (isinstance(value, int | float) and not isinstance(value, bool) and is_finite(value)
            and 0 < value <= most)


def shown(value: Any) -> str:
    """``value`` as a refusal shows it: its ``repr``, but an int past 64 bits by its size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"{'a negative' if value < 0 else 'an'} int of {value.bit_length()} bits"
    return repr(value)
