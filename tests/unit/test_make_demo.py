"""`make demo` installs the training side only (kdist[train]), not the test and compat extras."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
def test_make_demo_installs_train_only() -> None:
    # -n: print, run nothing; -B: every target as if out of date (the stamps may exist).
    out = subprocess.run(["make", "-n", "-B", "demo"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    installs = [line for line in out.splitlines() if "pip install" in line]
    assert installs and all("'.[train]'" in line for line in installs), installs
    for extra in ("test", "compat", "plot"):
        assert extra not in " ".join(installs), installs


def test_readme_says_make_a_virtualenv_first() -> None:
    text = (ROOT / "README.md").read_text()
    assert text.index("python3 -m venv .venv") < text.index("make demo")
