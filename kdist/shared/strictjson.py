"""JSON that every parser reads: what kdist prints (`-o json`) and writes on the cluster.

Python's json writes NaN and the infinities as `NaN` and `Infinity`, which no JSON
parser but Python's reads (jq, kubectl, JavaScript refuse the whole document). A
number from the cluster or a worker may be one (an annotation holding `NaN`), so
here they are null, as "not known", and anything else json cannot write is an error
as before (allow_nan=False makes sure none slips through).

Standard library only.
"""

from __future__ import annotations

import json
import math
from typing import Any


def dumps(value: Any, **options: Any) -> str:
    """`value` as strict JSON (json.dumps `options`), NaN and infinities as null."""
    try:  # most values have no such float: written as they are, without finite's copy
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:
        return json.dumps(finite(value), allow_nan=False, **options)


def finite(value: Any) -> Any:
    """A copy of `value` with every float that is not finite, at any depth, as None
    (lists and tuples come back as lists)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
