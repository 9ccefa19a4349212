"""Compiled templates kept between runs, so a cold `kdist render` skips Jinja's compiler.

Lexing, parsing and compiling the templates to Python is ~15 ms of every cold
command that renders (bench/README.md, "CLI"); Jinja's bytecode cache keeps the
compiled code keyed by the template's name and the checksum of its source, so
an edited or upgraded template is never served stale. The cache is marshalled
code, so it lives only in a directory this user owns and nobody else can write
(``$XDG_CACHE_HOME/kdist/templates``, ``~/.cache`` by default); anything else (a
read-only home, a foreign owner, ``KDIST_TEMPLATE_CACHE=off``) means no cache,
never an error.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import jinja2
from jinja2.bccache import Bucket

OFF = "KDIST_TEMPLATE_CACHE"


def directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kdist" / "templates"


def bytecode_cache() -> jinja2.BytecodeCache | None:
    """A cache in a private directory of this user's, or None where there can be none."""
    if os.environ.get(OFF, "").lower() in ("off", "0", "false", "no"):
        return None
    path = directory()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return _Cache(str(path), "%s.jinja")


class _Cache(jinja2.FileSystemBytecodeCache):
    """Jinja's file cache, but a full disk or a damaged entry costs a compile, not the command."""

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # a torn or foreign file: pickle and marshal raise many kinds
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass
