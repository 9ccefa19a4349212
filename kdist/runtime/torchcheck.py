"""Which torch the workers will import, read without importing it, and whether kdist's
runtime supports it.

The launcher never imports torch (1-2 s, and the workers import it anyway), yet a
torch kdist was never tested on should stop the job before training, by name, not
fail later inside a collective. The version comes from the ``torch/version.py`` of
the package Python would import (what the workers get, even where a package manager's
records disagree, as Debian's python3-torch may), else from the installed metadata.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path

from kdist.shared import env as E
from kdist.shared.errors import LaunchError

#: The torch minor releases kdist's runtime is tested on, oldest and newest
#: (PyPI's 2.15 and Debian's 2.14 in CI; pyproject's ``train`` extra asks >= 2.8).
SUPPORTED = ((2, 8), (2, 15))
#: Set to 1 (spec.env) to start the workers on a torch outside SUPPORTED anyway.
ANY_TORCH = E.ANY_TORCH

_VERSION_LINE = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", re.M)
_MINOR = re.compile(r"(\d+)\.(\d+)")


def installed_version() -> str | None:
    """torch's version as its package says, or None where there is no torch."""
    try:
        spec = importlib.util.find_spec("torch")  # a top-level name: nothing is imported
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    for location in spec.submodule_search_locations or []:
        try:
            text = (Path(location) / "version.py").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        match = _VERSION_LINE.search(text)
        if match:
            return match.group(1)
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _span() -> str:
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED
    return f"{lo_major}.{lo_minor}-{hi_major}.{hi_minor}"


def refusal(version: str | None) -> str | None:
    """Why the workers must not start on this torch, or None when they may.

    No torch at all is not refused here: a script of the user's may not need it, and
    kdist's own workloads say so themselves when they import it.
    """
    if version is None:
        return None
    match = _MINOR.match(version)
    if match is None:
        return (f"torch {version!r} in this image: kdist cannot read its version; "
                f"kdist's runtime needs {_span()}")
    minor = (int(match.group(1)), int(match.group(2)))
    if SUPPORTED[0] <= minor <= SUPPORTED[1]:
        return None
    return (f"torch {match.group(0)} in this image; kdist's runtime needs {_span()} "
            f"(or set {ANY_TORCH}=1 in the pod's env to try it anyway)")


def check(environ: Mapping[str, str] = os.environ) -> None:
    """Raise LaunchError (exit 2: a code error, never retried) on an unsupported torch."""
    if environ.get(ANY_TORCH, "") == "1":
        return
    why = refusal(installed_version())
    if why is not None:
        raise LaunchError(why)
