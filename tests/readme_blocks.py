"""The README's Python code blocks, by a line they hold (for the tests that run them)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_block(holding: str) -> str:
    """The one ```python block of README.md that contains `holding`."""
    blocks = re.findall(r"^```python\n(.*?)^```$", README.read_text(), re.S | re.M)
    found = [b for b in blocks if holding in b]
    assert len(found) == 1, f"{len(found)} README python blocks hold {holding!r}"
    return found[0]
