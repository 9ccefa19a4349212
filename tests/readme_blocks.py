"""The Python code blocks of README.md and docs/*.md, by a line they hold (for the tests
that run them), and the markdown files themselves (for the link check)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# Every block is run by a test (RUN) or, a fragment of a larger program, compiled (FRAGMENTS).
RUN = {
    'client = kdist.Client(namespace="team-a")': "tests/api/test_readme.py",
    "local=True)": "tests/dist/test_readme.py",
}
FRAGMENTS = {"kdist.preemption_requested()": "docs/byo-script.md: the loop of a script"}


def markdown_files() -> list[Path]:
    """README.md and every page under docs/, in a fixed order."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks() -> list[tuple[Path, str]]:
    """(file, code) for every ```python block of the markdown files."""
    return [(path, code) for path in markdown_files()
            for code in re.findall(r"^```python\n(.*?)^```$", path.read_text(), re.S | re.M)]


def python_block(holding: str) -> str:
    """The one ```python block, of README.md and docs/*.md together, that contains `holding`."""
    found = [code for _, code in python_blocks() if holding in code]
    assert len(found) == 1, f"{len(found)} python blocks of README.md and docs/ hold {holding!r}"
    return found[0]
