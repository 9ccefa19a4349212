"""Argument rules shared by the CLI's flags and the Python API's keywords, one message each.

Standard library only. A flag (`--timeout`) and a keyword (`timeout=`) that
mean the same thing are refused for the same reasons with the same words, so
the bad-input guarantee (docs/security.md) holds for both.
"""

from __future__ import annotations

import math
from typing import Any

#: The longest wait or request deadline kdist takes: a week.
MAX_SECONDS = 7 * 86400


def seconds_problem(value: Any, limit: float = MAX_SECONDS) -> str | None:
    """Why `value` is not a positive, finite number of seconds of at most `limit`, or None.

    Numbers and their text are taken; nan, inf, 0, negatives, booleans and
    anything else are refused.
    """
    if isinstance(value, bool):
        return f"{value!r} is not a number of seconds"
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return f"{value!r} is not a number of seconds"
    else:
        return f"{value!r} is not a number of seconds"
    if not math.isfinite(number) or not 0 < number <= limit:
        return f"{value!r} must be more than 0 and at most {limit:g} seconds"
    return None


def int_range_problem(value: Any, low: int, high: int) -> str | None:
    """Why `value` is not a whole number in [low, high] (click's IntRange words), or None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{value!r} is not a valid integer"
    if not low <= value <= high:
        return f"{value} is not in the range {low}<=x<={high}"
    return None
