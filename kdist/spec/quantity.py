"""Kubernetes resource quantities ("500m", "4Gi", "1e3"), parsed exactly."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
# The API server's own grammar: a signed decimal, then a binary or decimal
# suffix or a decimal exponent. We refuse signs: no kdist quantity is negative.
_QUANTITY = re.compile(
    r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"  # the number
    r"((?:[KMGTPE]i)|[mkMGTPE]|[eE][+-]?[0-9]{1,3})?$"  # binary, decimal or exponent
)


#: The same grammar for a JSON Schema (editors flag `4GB` as `kdist validate` does).
QUANTITY_PATTERN = _QUANTITY.pattern


def parse_quantity(text: str) -> Decimal:
    """Return the quantity's value in base units; raise ValueError when malformed."""
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (e.g. 500m, 2, 4Gi)")
    number, suffix = m.group(1), m.group(2) or ""
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from None
    if suffix[:1] in ("e", "E"):
        return value * (Decimal(10) ** int(suffix[1:]))
    return value * _SUFFIX[suffix]


def format_bytes(n: int) -> str:
    """The shortest exact binary quantity for `n` bytes (Mi granularity at least)."""
    for suffix, unit in (("Gi", 1 << 30), ("Mi", 1 << 20)):
        if n % unit == 0:
            return f"{n // unit}{suffix}"
    return f"{max(1, n >> 20)}Mi"
