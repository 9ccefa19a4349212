"""Where in the user's own code a traceback ended: the `file:line` a failure line names.

A rank's traceback runs through torch, kdist's launcher and the standard library;
the frame a user wants is the innermost one in *their* code (`train.py:42`), so a
failure line can say where to look without the whole traceback. Library code is
what lives under this interpreter's install paths (the standard library, site- and
dist-packages, wherever a venv put them) or under kdist's own package; pseudo-files
(`<frozen ...>`, `<string>`) are nobody's file. Standard library only: the launcher
and the Python API both use it.
"""

from __future__ import annotations

import os
import re
import sysconfig
from collections.abc import Iterable

TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)')
# torch.distributed's excepthook prefixes each line of an uncaught error with its rank.
_TORCH_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ?")
# Install layouts of other interpreters too (an image's, when its traceback is read here).
_LIBRARY_PARTS = ("site-packages", "dist-packages")
_STDLIB = re.compile(r"[/\\]lib(64)?[/\\]python\d+(\.\d+)?[/\\]")


def library_dirs() -> tuple[str, ...]:
    """This interpreter's library directories, and kdist's package."""
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # kdist/
    return tuple(sorted(os.path.join(os.path.realpath(d), "") for d in dirs))


def is_users(path: str, libraries: Iterable[str]) -> bool:
    """Whether a traceback's file is the user's: a real file, in no library directory."""
    if not path or path.startswith("<"):
        return False
    parts = re.split(r"[/\\]", path)
    if any(p in _LIBRARY_PARTS for p in parts) or _STDLIB.search(path):
        return False
    real = os.path.join(os.path.realpath(path), "") if os.path.isabs(path) else path
    return not any(real.startswith(lib) for lib in libraries)


def user_frame(text: str | Iterable[str], base: str | None = None,
               libraries: Iterable[str] | None = None) -> str | None:
    """`file:line` of the innermost user frame of the last traceback in `text` (a
    rank's output, or its lines), the file relative to `base` when under it; None
    when no frame of it is the user's."""
    lines = text.splitlines() if isinstance(text, str) else list(text)
    lines = [_TORCH_RANK_PREFIX.sub("", line, count=1) for line in lines]
    starts = [i for i, line in enumerate(lines) if line.rstrip() == TRACEBACK]
    if not starts:
        return None
    frames: list[tuple[str, int]] = []
    for line in lines[starts[-1] + 1:]:
        m = _FRAME.match(line)
        if m is not None:
            frames.append((m.group(1), int(m.group(2))))
        elif line.strip() and not line.startswith((" ", "\t")):
            break  # the exception line: the traceback's end
    libs = tuple(library_dirs() if libraries is None else libraries)
    for path, number in reversed(frames):
        if is_users(path, libs):
            return f"{_shown(path, base)}:{number}"
    return None


def _shown(path: str, base: str | None) -> str:
    if base and os.path.isabs(path):
        rel = os.path.relpath(path, base)
        if not rel.startswith(os.pardir):
            return rel
    return path
